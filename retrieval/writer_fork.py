"""A store writer child forked from the build rather than started as a fresh interpreter.

A spawned writer spends its first ~0.8 s (H200 host) starting Python and importing kbase and
chromadb while the vectors queue up for it; a fork starts with all of that the parent had
imported. Forking is safe only while this process holds nothing of Chroma's running: a client
made before the fork leaves the child a runtime whose threads stayed behind. A CUDA context and
the tokenizer's threads are no obstacle: the child touches neither, as the forked BM25 build
(forked.py) does not.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import BinaryIO


def fork_writers() -> bool:
    """Whether store writers are forked (KBASE_STORE_FORK=0 spawns them, 1 forks them): by
    default where the platform forks and this process has made no Chroma client yet."""
    env = os.environ.get("KBASE_STORE_FORK", "").strip()
    if env:
        return env != "0"
    import multiprocessing

    from kbase.retrieval.vectors import clients_made

    return "fork" in multiprocessing.get_all_start_methods() and not clients_made[0]


class ForkedWriter:
    """The few parts of subprocess.Popen that StoreWriter uses, for a forked child running
    serve(stdin, stdout)."""

    def __init__(self, serve: Callable[[BinaryIO, BinaryIO], int]):
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        for stream in (sys.stdout, sys.stderr):  # or the child would write them out again
            try:
                stream.flush()
            except (AttributeError, OSError, ValueError):
                pass
        pid = os.fork()
        if pid == 0:  # the child: never returns into the caller's code
            code = 1
            try:
                _keep_only(in_r, out_w)
                # what Chroma or a library prints goes to stderr: the parent's stdout may be
                # a --json answer
                os.dup2(2, 1)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                code = serve(os.fdopen(in_r, "rb"), os.fdopen(out_w, "wb"))
            finally:
                os._exit(code)
        os.close(in_r)
        os.close(out_w)
        self.pid = pid
        self.returncode: int | None = None
        self.stdin: BinaryIO | None = os.fdopen(in_w, "wb")
        self.stdout: BinaryIO | None = os.fdopen(out_r, "rb")

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        if self.stdout is not None:
            self.stdout.close()
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _keep_only(*fds: int) -> None:
    """Close every descriptor but stdio and `fds`: a writer forked after another holds the
    other's pipe ends, and its stdin would then never see the end of its input."""
    keep = {0, 1, 2, *fds}
    try:
        opened = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        opened = list(range(3, 4096))
    for fd in opened:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
