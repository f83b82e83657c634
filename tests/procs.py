"""Processes read from /proc: tests that kill a command check what it leaves behind."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest


def session_members(sid: int) -> list[tuple[int, bytes]]:
    """(pid, command line) of each live process of session `sid` (a command started with
    start_new_session=True heads one whose id is its pid); zombies are left out."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            out.append((int(pid), cmd))
    return out


def left_in_session(sid: int, wait_s: float = 10.0) -> list[tuple[int, bytes]]:
    """What of session `sid` is still alive after up to `wait_s` (children of a killed process
    get EOF on their pipes and exit on their own, not at once)."""
    deadline = time.monotonic() + wait_s
    while (left := session_members(sid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def kill9_when(proc, ready, what: str, timeout_s: float = 60.0) -> None:
    """SIGKILL `proc` as soon as `ready()` says it is in the middle of its work (or after
    `timeout_s`); skips the test when the command finished before it could be killed."""
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and not ready() and time.monotonic() < deadline:
        time.sleep(0.005)
    try:
        os.kill(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    if proc.returncode != -signal.SIGKILL:
        pytest.skip(f"the {what} finished before it could be killed on this machine")
