"""Chroma's inserts in a process of their own, beside a large build.

Chroma's upsert holds the GIL for its whole call (HNSW construction and sqlite writes): from a
thread it would stall the embedding loop and the BM25 build as surely as running inline. A child
process owns the store while the build embeds, so the inserts overlap the model's work and the
BM25 build instead of adding to them. The parent holds no client of its own meanwhile: an
embedded Chroma is not safe to write from two processes at once.

The child is forked from the build where that is safe (writer_fork.py), else it is
`python -m kbase.retrieval.store_writer`; either way it is fed length-prefixed pickles by a
feeder thread (writing a pipe releases the GIL, and the embedding loop never waits on a slow
store); it answers one pickle on stdout when stdin is done: the seconds it spent writing, or the
error that stopped it.
"""

from __future__ import annotations

import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from kbase.errors import Unavailable


def min_chunks() -> int:
    """Below this many chunks to embed (KBASE_STORE_PROCESS_MIN_CHUNKS, default 2,000), a second
    interpreter importing chromadb (~1 s) costs more than the inserts it would overlap: a
    one-skill re-index upserts a handful of vectors."""
    return int(os.environ.get("KBASE_STORE_PROCESS_MIN_CHUNKS") or 2000)


_HEADER = struct.Struct("<Q")
_NOTHING = object()


def merge_rows() -> int:
    """Queued upserts of one partition are merged up to this many rows (KBASE_STORE_MERGE_ROWS;
    1 merges nothing). VectorStore.upsert cuts at 1,000 rows per Chroma call anyway."""
    return int(os.environ.get("KBASE_STORE_MERGE_ROWS") or 1000)


def _joins(first: tuple, op: tuple, ids: set[str]) -> bool:
    """Whether `op` can go in one Chroma call with the upsert `first` (and the ones already
    joined to it, whose ids are `ids`): the same partition, metadata on both sides or neither,
    and no id twice (one call takes each id once)."""
    return (
        op[0] == "upsert"
        and op[1] == first[1]
        and (op[4] is None) == (first[4] is None)
        and ids.isdisjoint(op[2])
    )


def _joined(ops: list[tuple]) -> tuple:
    if len(ops) == 1:
        return ops[0]
    metadatas = None if ops[0][4] is None else [m for op in ops for m in op[4]]
    ids = [i for op in ops for i in op[2]]
    return ("upsert", ops[0][1], ids, np.concatenate([op[3] for op in ops]), metadatas)


class StoreWriterError(Unavailable):
    """The writer process could not store the build's vectors (its error is in the message)."""


class StoreWriter:
    """upsert/delete as VectorStore has them, carried out by the child; finish() waits for it."""

    def __init__(self, home: Path, chroma_url: str | None, collection: str | None = None):
        from kbase.retrieval.writer_fork import ForkedWriter, fork_writers

        self.forked = fork_writers()
        self._proc: Any
        if self.forked:
            self._proc = ForkedWriter(_serve)
        else:
            env = dict(os.environ)
            # The child imports kbase from wherever this process did: the same path, in the
            # same order, and (-P) no working directory in front of it to shadow the package.
            env["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)
            self._proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "kbase.retrieval.store_writer"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
            )
        self._todo: queue.Queue[tuple | None] = queue.Queue()
        self._broken: BaseException | None = None
        self.applied = 0  # operations the child carried out (finish() sets it)
        self._merge_rows = merge_rows()
        self._feeder = threading.Thread(target=self._feed, name="kbase-store-feed", daemon=True)
        self._feeder.start()
        self._send(("open", str(home), chroma_url, collection))

    def _send(self, op: tuple) -> None:
        if self._broken is not None:
            raise StoreWriterError(f"the vector store writer stopped: {self._broken}")
        self._todo.put(op)

    def _feed(self) -> None:
        pipe = self._proc.stdin
        assert pipe is not None
        held: Any = _NOTHING  # taken from the queue while merging, not written yet
        try:
            while True:
                op = self._todo.get() if held is _NOTHING else held
                held = _NOTHING
                if op is None:
                    break
                if op[0] == "upsert":
                    op, held = self._with_queued(op)
                blob = pickle.dumps(op, protocol=pickle.HIGHEST_PROTOCOL)
                pipe.write(_HEADER.pack(len(blob)))
                pipe.write(blob)
            pipe.close()
        except (BrokenPipeError, OSError) as exc:  # the child died; finish() reports why
            self._broken = exc

    def _with_queued(self, first: tuple) -> tuple[tuple, Any]:
        """`first` joined by the upserts of its partition queued behind it, up to merge_rows():
        they queue while the child is busy (its start-up, a slow insert), and a Chroma call
        costs about as much for 256 rows as for 1,000. Also the next operation taken from the
        queue that could not join (_NOTHING if none)."""
        ops, ids = [first], set(first[2])
        while len(ids) < self._merge_rows:
            try:
                nxt = self._todo.get_nowait()
            except queue.Empty:
                break
            if nxt is None or not _joins(first, nxt, ids):
                return _joined(ops), nxt
            ops.append(nxt)
            ids.update(nxt[2])
        return _joined(ops), _NOTHING

    def upsert(self, key: str, ids: list[str], vectors: Any, metadatas: list[dict] | None) -> None:
        # copies: the op is pickled later, on the feeder thread
        rows = np.array(vectors, dtype=np.float32)
        self._send(("upsert", key, list(ids), rows, None if metadatas is None else list(metadatas)))

    def delete(self, key: str, ids: list[str]) -> None:
        self._send(("delete", key, list(ids)))

    def finish(self) -> float:
        """Wait until every operation is written; the seconds the child spent on them."""
        self._todo.put(None)
        self._feeder.join()
        assert self._proc.stdout is not None
        out = self._proc.stdout.read()  # the stdin side is closed by the feeder
        self._proc.wait()
        try:
            status, value, *applied = pickle.loads(out)
        except Exception:  # noqa: BLE001 - nothing or half a pickle: the child crashed
            raise StoreWriterError(
                f"the vector store writer exited with status {self._proc.returncode} "
                "before answering (its error is above)"
            ) from None
        if status != "ok":
            raise StoreWriterError(f"the vector store writer failed: {value}")
        self.applied = applied[0] if applied else 0
        return float(value)

    def abandon(self) -> None:
        """After a failed build: stop the child without waiting for what it has left."""
        self._todo.put(None)
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()


def writer_count(partitions: int) -> int:
    """Writer processes for a large build (KBASE_STORE_WRITERS; default one per 4 cores, at
    most 4): on 2 cores the model is the bottleneck and another interpreter would only compete
    with it; on the H200 machine's 16, four writers took the inserts from 2.9-3.4 s to the
    largest partition's 1.8-1.9 s."""
    env = os.environ.get("KBASE_STORE_WRITERS", "").strip()
    n = int(env) if env else min(4, (os.cpu_count() or 1) // 4)
    return max(1, min(n, partitions))


class StoreWriters:
    """The partitions of a build spread over several StoreWriter children, each partition always
    to the same child (an embedded partition directory has one writer): the largest first, each
    to the least loaded child. Same methods as StoreWriter."""

    def __init__(
        self,
        home: Path,
        chroma_url: str | None,
        sizes: dict[str, int],
        collection: str | None = None,
    ):
        n = writer_count(len(sizes))
        self._children: list[StoreWriter] = []
        try:
            for _ in range(n):
                self._children.append(StoreWriter(home, chroma_url, collection))
        except BaseException:
            self.abandon()
            raise
        load = [0] * n
        self._route: dict[str, int] = {}
        for key, size in sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0])):
            i = load.index(min(load))
            self._route[key] = i
            load[i] += size

    @property
    def processes(self) -> int:
        return len(self._children)

    @property
    def start(self) -> str:
        """How the children started: forked or spawned."""
        return "forked" if all(c.forked for c in self._children) else "spawned"

    def _child(self, key: str) -> StoreWriter:
        return self._children[self._route.setdefault(key, 0)]

    def upsert(self, key: str, ids: list[str], vectors: Any, metadatas: list[dict] | None) -> None:
        self._child(key).upsert(key, ids, vectors, metadatas)

    def delete(self, key: str, ids: list[str]) -> None:
        self._child(key).delete(key, ids)

    def finish(self) -> float:
        """Wait for every child; the longest a child spent writing (they write side by side).
        Every child is waited for even when one failed; the first failure is raised."""
        spent: list[float] = []
        failed: StoreWriterError | None = None
        for child in self._children:
            try:
                spent.append(child.finish())
            except StoreWriterError as exc:
                failed = failed or exc
        self._children = []
        if failed is not None:
            raise failed
        return max(spent, default=0.0)

    def abandon(self) -> None:
        for child in self._children:
            child.abandon()
        self._children = []


def _read_ops(pipe: BinaryIO):
    while head := pipe.read(_HEADER.size):
        (size,) = _HEADER.unpack(head)
        yield pickle.loads(pipe.read(size))


def _serve(stdin: BinaryIO, stdout: BinaryIO) -> int:
    from kbase.retrieval.vectors import VectorStore

    store: VectorStore | None = None
    busy = 0.0
    applied = 0  # operations carried out, after the feeder's merging
    try:
        for op in _read_ops(stdin):
            t = time.perf_counter()
            if op[0] == "open":
                store = VectorStore(Path(op[1]), op[2], op[3])
            elif store is None:
                raise StoreWriterError(f"{op[0]} before open")
            elif op[0] == "upsert":
                store.upsert(op[1], op[2], op[3], op[4])
            elif op[0] == "delete":
                store.delete(op[1], op[2])
            else:
                raise StoreWriterError(f"unknown operation {op[0]!r}")
            busy += time.perf_counter() - t
            applied += 1
        if store is not None:
            store.close()
        answer: tuple = ("ok", busy, applied)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        answer = ("error", f"{type(exc).__name__}: {exc}")
    stdout.write(pickle.dumps(answer))
    stdout.flush()
    return 0 if answer[0] == "ok" else 1


if __name__ == "__main__":
    # The answer gets the real stdout to itself; anything Chroma or a library prints goes to stderr.
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    sys.exit(_serve(sys.stdin.buffer, os.fdopen(answer_fd, "wb")))
