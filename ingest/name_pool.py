"""Name the symbols of a long run of commits in worker processes: docs/pr-archive.md "Symbols
from parsed code" says why and how (one path, one worker; commits in order; `kill -9` safe)."""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import traceback
import zlib
from collections import deque
from subprocess import PIPE

from kbase.ingest.change_symbols import SymbolNamer, apply_named
from kbase.ingest.definitions import grammar_for
from kbase.ingest.gitlog import CommitFacts, OnCommit

from kbase.errors import KbaseError

LAG = 256  # commits waiting for their symbols at most (bounds the memory they hold)


class WorkerFailed(KbaseError):
    """A naming worker died or raised."""


class NamePool:
    """The SymbolNamer interface (`name_commit`, `drain`, `parsed`, `incremental`) in processes."""

    def __init__(self, git_dir: str, workers: int):
        # -P: the current directory does not shadow the installed kbase
        cmd = [sys.executable, "-P", "-m", "kbase.ingest.name_pool", git_dir]
        # process_group=0: a terminal's Ctrl-C reaches only the mining process, which ends the
        # workers; sent to them too, it could land while one still imports, before it can ignore it
        self._procs = [
            subprocess.Popen(cmd, stdin=PIPE, stdout=PIPE, process_group=0) for _ in range(workers)
        ]
        self._answers: queue.SimpleQueue = queue.SimpleQueue()
        self._counts = [(0, 0)] * workers  # each worker's (parsed, incremental) so far
        # [commit, then, answers still due, its sequence number], oldest first
        self._pending: deque[list] = deque()
        self._seq = 0
        for i, p in enumerate(self._procs):
            threading.Thread(target=self._read, args=(i, p), daemon=True).start()

    def _read(self, i: int, proc: subprocess.Popen) -> None:
        """Every answer of worker `i`, onto the queue (a thread per worker: the mining process
        never stops reading, so a worker never blocks on a full pipe)."""
        assert proc.stdout is not None
        try:
            while True:
                self._answers.put((i, pickle.load(proc.stdout)))
        except Exception as e:  # EOF: the worker ended (its failure, if any, came first)
            self._answers.put((i, e))

    def name_commit(self, commit: CommitFacts, then: OnCommit) -> None:
        batches: dict[int, list] = {}
        for k, f in enumerate(commit.files):
            if f.hunks and grammar_for(f.path) is not None:
                w = zlib.crc32(f.path.encode("utf-8", "surrogateescape")) % len(self._procs)
                batches.setdefault(w, []).append((k, f.path, f.old_blob, f.new_blob, f.hunks))
        self._pending.append([commit, then, len(batches), self._seq])
        for w, batch in batches.items():
            stdin = self._procs[w].stdin
            assert stdin is not None
            try:
                pickle.dump((self._seq, batch), stdin, protocol=pickle.HIGHEST_PROTOCOL)
                stdin.flush()
            except OSError:  # it died: its reader thread has put why on the queue
                self.drain()
        self._seq += 1
        self.drain(wait=False)

    def drain(self, wait: bool = True) -> None:
        """Hand on the commits whose symbols are all in, oldest first; wait for answers when
        `wait` (all of them) or when more than LAG commits are pending."""
        while self._pending:
            if self._pending[0][2] == 0:
                commit, then, _, _ = self._pending.popleft()
                then(commit)
            elif not self._take(block=wait or len(self._pending) > LAG):
                return

    def _take(self, block: bool) -> bool:
        """Apply one worker's answer; False when none was there (and `block` is False)."""
        try:
            i, answer = self._answers.get(block=block)
        except queue.Empty:
            return False
        if isinstance(answer, BaseException):
            code = self._procs[i].wait()
            how = f"signal {-code}" if code < 0 else f"status {code}"
            raise WorkerFailed(f"a naming worker (pid {self._procs[i].pid}) ended with {how}")
        if answer[0] == "failed":
            raise WorkerFailed(f"a naming worker failed:\n{answer[1]}")
        seq, named, self._counts[i] = answer
        entry = self._pending[seq - self._pending[0][3]]
        for k, got in named:
            apply_named(entry[0].files[k], got)
        entry[2] -= 1
        return True

    @property
    def parsed(self) -> int:
        return sum(c[0] for c in self._counts)

    @property
    def incremental(self) -> int:
        return sum(c[1] for c in self._counts)

    def close(self) -> None:
        """End the workers: at end of input when all was answered, at once when a failure left
        commits waiting (a worker would otherwise parse all that was sent to it first)."""
        for p in self._procs:
            if self._pending:
                p.kill()
            with contextlib.suppress(OSError):  # it died with requests unread
                if p.stdin:
                    p.stdin.close()
        for p in self._procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _serve(git_dir: str) -> None:
    from kbase.ingest.logrun import BlobReader

    # a SIGINT sent to our group is the mining process's to handle: it ends us
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    reader = BlobReader(git_dir)
    namer = SymbolNamer(reader.read)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    try:
        while True:
            seq, batch = pickle.load(inp)
            named = [(k, namer.name(path, old, new, hunks)) for k, path, old, new, hunks in batch]
            pickle.dump((seq, named, (namer.parsed, namer.incremental)), out, protocol=5)
            out.flush()
    except (EOFError, BrokenPipeError):  # our input ended (the mining process is done) or output
        return
    except Exception:
        pickle.dump(("failed", traceback.format_exc()), out)
        out.flush()
        os._exit(1)
    finally:
        reader.close()


if __name__ == "__main__":
    _serve(sys.argv[1])
