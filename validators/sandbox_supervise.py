"""Watching a started sandboxed run to its end: its output read as it comes, its deadline, the
kill of everything it left behind, and the result it gives (validators/sandbox.py starts it).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kbase.validators.capture import Scanner, pump
from kbase.validators.cgroup import RunCgroup
from kbase.validators.hostproc import kill_by_marker
from kbase.validators.sandbox_limits import Limits

MARKER = "KBASE_SANDBOX_ID"


@dataclass
class SandboxResult:
    returncode: int | None  # negative: killed by that signal; None: never started
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool
    isolated: bool  # ran inside the bubblewrap sandbox
    orphans_killed: int
    error: str = ""
    limits: dict = field(default_factory=dict)
    memory_hit: bool = False
    pids_hit: bool = False
    measures: list[tuple[str, str]] = field(default_factory=list)
    literals_seen: list[str] = field(default_factory=list)
    completed: bool = False  # the run's own completion record came back (run_command.py)

    @property
    def signal_name(self) -> str:
        if self.returncode is None or self.returncode >= 0:
            return ""
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"


# Runs in flight, so that an interrupted kbase (Ctrl-C, SIGTERM from CI) can take them down too.
_live: dict[int, Callable[[], int]] = {}
_live_lock = threading.Lock()


def kill_all_live() -> int:
    with _live_lock:
        running = list(_live.values())
    return sum(k() for k in running)


def _decode_status(rc: int | None, status_lines: str) -> tuple[int | None, bool]:
    """(returncode with signals negative, whether bwrap started the command at all)."""
    started, code = False, None
    for line in status_lines.splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "child-pid" in obj:
            started = True
        if "exit-code" in obj:
            code = int(obj["exit-code"])
    if code is None:
        code = rc
    # bwrap reports a child killed by signal N as exit status 128 + N
    if code is not None and 128 < code <= 128 + 64:
        code = -(code - 128)
    return code, started


def _go(proc: subprocess.Popen) -> None:
    """Tell a waiting run to start; a run that already ended is the supervisor's to report."""
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"g")
        proc.stdin.close()
    except (BrokenPipeError, OSError, ValueError):
        pass


def _supervise(
    proc: subprocess.Popen,
    cg: RunCgroup | None,
    token: str,
    sandboxed: bool,
    limits: Limits,
    limits_row: dict,
    literals: Iterable[str],
    status_r: int,
    grace: float,
    start: float,
    record: tuple[int, bytes] = (-1, b""),
) -> SandboxResult:
    lits = list(literals)
    out, err = Scanner(True, lits), Scanner(False, lits)

    def kill() -> int:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        n = cg.kill_all() if cg else 0
        if not sandboxed:
            n += kill_by_marker(MARKER, token)
        return n

    with _live_lock:
        _live[proc.pid] = kill
    readers = [
        threading.Thread(target=pump, args=(proc.stdout, out), daemon=True),
        threading.Thread(target=pump, args=(proc.stderr, err), daemon=True),
    ]
    for t in readers:
        t.start()
    timed_out = not _wait_exit(proc, limits.timeout_s)
    if timed_out and grace > 0:
        # let the snippet's own watchdog print where it is stuck before we pull the plug
        _wait_exit(proc, grace)
    orphans = kill()
    proc.wait()
    with _live_lock:
        _live.pop(proc.pid, None)
    duration = time.monotonic() - start
    for t in readers:
        t.join(timeout=5)
    status = _drain(status_r)
    rc, started = _decode_status(proc.returncode, status.decode("utf-8", "replace"))
    completed, recorded_rc = _read_record(record)
    if recorded_rc is not None:
        rc = recorded_rc  # a compiled run's own status, from its wrapper (run_command.py)
    error = ""
    if sandboxed and not started and not timed_out:
        error = "the sandbox did not start: " + (err.text().strip()[-500:] or f"exit {rc}")
    seen = out.seen | err.seen
    return SandboxResult(
        returncode=rc,
        stdout=out.text(),
        stderr=err.text(),
        duration_s=duration,
        timed_out=timed_out,
        isolated=sandboxed,
        orphans_killed=orphans,
        error=error,
        limits=limits_row,
        memory_hit=bool(cg and cg.memory_hit()),
        pids_hit=bool(cg and cg.pids_hit()),
        measures=out.measures,
        literals_seen=[lit for lit in lits if lit in seen],
        completed=completed,
    )


def _read_record(record: tuple[int, bytes]) -> tuple[bool, int | None]:
    """(the run wrote its completion record, the exit status the record gives, if any).
    The Python bootstrap writes the nonce; the wrapper of a compiled run `<status> <nonce>`."""
    fd, nonce = record
    data = _drain(fd) if nonce else b""
    if not data or not data.endswith(nonce):
        return False, None
    head = data[: -len(nonce)]
    if not head:
        return True, None
    try:
        return True, int(head.strip())
    except ValueError:
        return False, None


def _drain(fd: int) -> bytes:
    """What a pipe holds now (its writers are gone or never write again); b"" for no pipe."""
    data = b""
    if fd >= 0:
        os.set_blocking(fd, False)
        try:
            while chunk := os.read(fd, 65536):
                data += chunk
        except (BlockingIOError, OSError):
            pass
    return data


def _wait_exit(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait up to `timeout` s for the process to exit; True if it did.

    Popen.wait(timeout) polls with sleeps of up to 50 ms, which would be most of the sandbox's
    cost per run; a pidfd wakes us the moment the process exits.
    """
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        try:
            proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        ready, _, _ = select.select([fd], [], [], max(0.0, timeout))
    finally:
        os.close(fd)
    return bool(ready) or proc.poll() is not None
