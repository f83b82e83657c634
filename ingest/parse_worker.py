"""Parse blobs in a second process while the mining process reads git's stream and writes cards.

Tree-sitter and the scanners are most of a first mine's CPU time, and a blob's definitions
depend only on its bytes and on the tree of the version of the same file parsed just before
(the base of an incremental parse). So the mining process decides, in stream order and with
its caches exactly as a mine without a worker keeps them, which blobs to parse from which
base; it hands those decisions to the worker, which reads the blobs from its own
`git cat-file` and parses them in the same order with the same held trees, while the mining
process goes on with the next commits (`LAG` commits ahead). Cards are the same with or
without the worker; a short mine (an incremental one) runs without it, since starting it
costs more than it saves.
"""

from __future__ import annotations

import os
from typing import Any

from kbase.ingest.blobs import BlobReader
from kbase.ingest.change_symbols import Owners, SymbolNamer
from kbase.ingest.defs_cache import SCAN_PENDING, DefsCache, pack_defs, unpack_defs
from kbase.ingest.tree_parse import HeldTrees

# fewer commits to stream than this: no worker (a process fork and a second `git cat-file`
# cost more than a short mine parses)
MIN_COMMITS = 200
LAG = 32  # commits planned (their parses handed to the worker) ahead of the one being named


def worker_wanted(commits: int) -> bool:
    """Whether a mine of this many commits uses a parse worker: KBASE_MINE_WORKER=0 or 1
    decides; else a long mine on a machine with more than one CPU does."""
    env = os.environ.get("KBASE_MINE_WORKER", "")
    if env in ("0", "1"):
        return env == "1"
    return commits >= MIN_COMMITS and len(os.sched_getaffinity(0)) > 1


class ParseWorker:
    """The worker process and the mining process's end of its pipe. Parses are submitted as
    jobs and sent a commit at a time (`dispatch`); answers are read when first needed."""

    def __init__(self, git_dir: str):
        import multiprocessing

        # fork: the child starts with the grammars loaded and nothing to import; the mining
        # process has no other git process running yet, whose pipes the child would hold open
        ctx = multiprocessing.get_context("fork")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, git_dir, self._conn), daemon=True)
        self._proc.start()
        child.close()
        self._next = 0
        self._batch: list[tuple] = []
        self._answers: dict[int, Any] = {}

    def submit(self, lang: str, blob: str, path: str, base: tuple | None) -> int:
        self._next += 1
        self._batch.append((self._next, lang, blob, path, base))
        return self._next

    def dispatch(self) -> None:
        if self._batch:
            try:
                self._conn.send(self._batch)
            except OSError:  # the worker is gone: what it said last says why
                self._receive()
                raise
            self._batch = []

    def answer(self, job: int) -> Any:
        """(packed defs, packed scan or "pending" or None, incremental), or None when the blob
        cannot be read."""
        self.dispatch()
        while job not in self._answers:
            self._receive()
        return self._answers.pop(job)

    def _receive(self) -> None:
        try:
            got = self._conn.recv()
        except (EOFError, OSError):
            raise RuntimeError("the parse worker ended without answering") from None
        if isinstance(got, str):
            raise RuntimeError(f"the parse worker failed:\n{got}")
        self._answers.update(got)

    def close(self) -> None:
        try:
            self._conn.send(None)
        except (OSError, ValueError):
            pass
        self._conn.close()
        self._proc.join(timeout=30)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()


def _serve(conn, git_dir: str, theirs) -> None:
    """The worker: parse each batch of jobs in order, answer with the packed definitions.
    `theirs`, the mining process's end, is closed here first: a fork holds both ends, and a
    worker holding the other end never reads EOF when the mining process is killed."""
    theirs.close()
    # imported here: a mine without a worker (an incremental one) never pays for them
    import queue
    import threading
    import traceback

    jobs: queue.SimpleQueue = queue.SimpleQueue()

    def pump() -> None:
        # drains the pipe as batches come, so the mining process never waits on a full pipe
        # while this process waits for it to read answers
        while True:
            try:
                batch = conn.recv()
            except (EOFError, OSError):
                batch = None
            jobs.put(batch)
            if batch is None:
                return

    threading.Thread(target=pump, daemon=True).start()
    reader = BlobReader(git_dir)
    trees = HeldTrees()
    try:
        while (batch := jobs.get()) is not None:
            wanted = [job[2] for job in batch]
            blobs = reader.read_many(wanted) if len(wanted) > 1 else {}
            out: list[tuple[int, tuple | None]] = []
            for job, lang, blob, path, base in batch:
                data = blobs[blob] if blob in blobs else reader.read(blob)
                if data is None:
                    out.append((job, None))
                    continue
                (ts, scan), incremental = trees.parse(lang, blob, path, base, data)
                # SCAN_PENDING: the mining process scans the blob if a change needs it (few
                # do, and that keeps the scanner's share of the work on its side)
                packed: str | tuple | None = "pending" if scan is SCAN_PENDING else None
                if scan is not None and scan is not SCAN_PENDING:
                    packed = pack_defs(scan)
                out.append((job, (pack_defs(ts), packed, incremental)))
            conn.send(out)
    except BaseException:
        try:  # the mining process raises it (multiprocessing would print it here too)
            conn.send(traceback.format_exc())
        except (OSError, ValueError):
            pass
        raise SystemExit(1) from None
    finally:
        reader.close()


class _Parse:
    """A parse handed to the worker, until its answer is read."""

    __slots__ = ("job", "lang", "blob", "owners", "done")

    def __init__(self, job: int, lang: str, blob: str):
        self.job, self.lang, self.blob = job, lang, blob
        self.owners: Owners | None = None
        self.done = False


class WorkerNamer(SymbolNamer):
    """A SymbolNamer whose parses run in a ParseWorker: `plan` hands them over, `finish`
    waits for them."""

    lag = LAG

    def __init__(self, worker: ParseWorker, read_blob, cache: DefsCache | None = None):
        # blobs `prefetch` wants are marked as read (the worker reads them), so the disk
        # cache is asked about them exactly as often as without a worker
        super().__init__(read_blob, dict.fromkeys, cache)
        self.worker = worker

    def _parse(self, lang: str, blob: str, path: str, base: tuple | None) -> object:
        self._pending.pop(blob, None)
        return _Parse(self.worker.submit(lang, blob, path, base), lang, blob)

    def dispatch(self) -> None:
        self.worker.dispatch()

    def settle(self, got: object) -> Owners | None:
        if not isinstance(got, _Parse):
            return got  # type: ignore[return-value]
        if not got.done:
            got.done = True
            answer = self.worker.answer(got.job)
            if answer is not None:
                ts_packed, scan_packed, incremental = answer
                scan = None
                if scan_packed == "pending":
                    scan = SCAN_PENDING
                elif scan_packed is not None:
                    scan = unpack_defs(scan_packed)
                defs = (unpack_defs(ts_packed), scan)
                self.parsed += 1
                self.incremental += incremental
                if self.disk is not None:
                    self.disk.put(got.blob, got.lang, defs)
                # the blob is read again for the scan of its error regions, when needed
                lazy = self._scanner(got.lang, got.blob) if scan is SCAN_PENDING else None
                got.owners = Owners(defs, lazy)
        return got.owners
