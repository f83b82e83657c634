"""Host-side process and file helpers the sandbox needs (outside any namespace)."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import stat
import sys
import time
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_libc: ctypes.CDLL | None
try:
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:  # not glibc-like; the registry of live runs still cleans up on a normal exit
    _libc = None


def libc_prctl_deathsig() -> None:
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def pids_with_marker(marker: str, token: str) -> list[int]:
    """Processes whose environment carries `marker=token`: an unsandboxed run and its children."""
    needle = f"{marker}={token}".encode()
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue  # gone already, or not ours
    return found


def kill_by_marker(marker: str, token: str) -> int:
    """SIGKILL escapees of an unsandboxed run (setsid, double fork), found by their marker."""
    killed = 0
    for _ in range(20):  # a fork bomb may spawn new ones while we kill; a few sweeps settle it
        pids = pids_with_marker(marker, token)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)
    return killed


def user_procs() -> int:
    """How many processes our real uid owns now (RLIMIT_NPROC counts them all)."""
    uid, n = os.getuid(), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    n += 1
            except OSError:
                continue
    return n


def rmtree(path: Path) -> None:
    def unlock(func, p, _exc):  # a snippet may have chmod'ed its own files read-only
        try:
            os.chmod(p, stat.S_IRWXU)
            func(p)
        except OSError:
            pass

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=unlock)
    else:
        shutil.rmtree(path, onerror=unlock)
