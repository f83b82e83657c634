"""A function run in a forked child while the parent goes on: the child inherits the parent's
memory (a build's entries and texts, nothing pickled) and sends back only its result or the
error it raised. For work that is pure Python and would otherwise hold the parent's GIL."""

from __future__ import annotations

import os
import pickle
import traceback
import warnings
from collections.abc import Callable
from typing import Any

from kbase.errors import KbaseError


class ForkedError(KbaseError):
    """The forked child raised, or died before it answered."""


# CPU seconds of the forked children this process waited for: a child's own children are forked
# twice as well, so no rusage of this process counts them (_child adds them to its report)
_waited_cpu = [0.0]


class Forked:
    """A function running in a forked child: call it to wait for what the function returned.
    `cpu_s`: the CPU seconds the child and the processes it waited for spent, once answered
    (the child is not this process's own, so its time appears in no rusage of this one)."""

    def __init__(self, read_fd: int, name: str):
        self._read_fd, self._name = read_fd, name
        self.cpu_s = 0.0

    def __call__(self) -> Any:
        with os.fdopen(self._read_fd, "rb") as src:
            data = src.read()
        if not data:
            raise ForkedError(f"{self._name}: the child process died before it answered")
        kind, value, self.cpu_s = pickle.loads(data)
        _waited_cpu[0] += self.cpu_s
        if kind != "ok":
            raise ForkedError(f"{self._name} failed in its child process: {value}")
        return value


def run_forked(fn: Callable[[], Any], name: str) -> Forked:
    """Start fn() in a forked child; calling what is returned waits for the child and returns
    what fn returned (picklable), or raises ForkedError with the child's traceback. The child is
    a grandchild (its parent leaves at once), so a build that fails before it waits leaves no
    zombie behind; the end of the pipe says when it is done."""
    read_fd, write_fd = os.pipe()
    with warnings.catch_warnings():
        # Python >= 3.12 warns that forking a process with threads may deadlock the child: the
        # child here runs only fn, which takes no lock another thread of the parent could hold
        # (no CUDA, no Chroma, no logging)
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
        if pid == 0:
            try:
                os.close(read_fd)
                if os.fork() == 0:
                    _child(fn, write_fd)  # never returns
            finally:
                os._exit(0)
    os.close(write_fd)
    os.waitpid(pid, 0)
    return Forked(read_fd, name)


def _child(fn: Callable[[], Any], write_fd: int) -> None:
    """Run fn, send the answer, and leave without the parent's exit hooks or buffers."""
    import resource

    code = 0
    _waited_cpu[0] = 0.0  # the parent's count came along with the fork
    try:
        try:
            answer: tuple[str, Any] = ("ok", fn())
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, whole
            answer = ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
            code = 1
        cpu = _waited_cpu[0]
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
            ru = resource.getrusage(who)
            cpu += ru.ru_utime + ru.ru_stime
        with os.fdopen(write_fd, "wb") as out:
            pickle.dump((*answer, cpu), out)
    finally:
        os._exit(code)
