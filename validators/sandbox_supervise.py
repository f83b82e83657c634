"""A sandboxed run seen from the host: its limits (how the child sets them between fork and exec,
the row that says which held), host-side process and file helpers, and the watch over a started
run (validators/sandbox.py starts it): its output, its deadline, the kill of all it left behind."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import select
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kbase.validators.capture import Scanner, pump
from kbase.validators.cgroup import RunCgroup, join_in_child, sigkill

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _all_pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def kill_by_marker(marker: str, token: str) -> int:
    """SIGKILL escapees of an unsandboxed run (setsid, double fork), found by the `marker=token`
    their environment carries, as the run's and its children's do."""
    needle, killed = f"{marker}={token}".encode(), 0
    for _ in range(20):  # a fork bomb may spawn new ones while we kill; a few sweeps settle it
        pids = []
        for pid in [p for p in _all_pids() if p != os.getpid()]:
            with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):  # (OSError: gone already, or not ours)
                    pids.append(pid)
        if not pids:
            break
        killed += sigkill(pids)
        time.sleep(0.02)
    return killed


def user_procs() -> int:
    """How many processes our real uid owns now (RLIMIT_NPROC counts them all)."""
    uid, n = os.getuid(), 0
    for pid in _all_pids():
        with contextlib.suppress(OSError):
            n += os.stat(f"/proc/{pid}").st_uid == uid
    return n


def rmtree(path: Path) -> None:
    def unlock(func, p, _exc):  # a snippet may have chmod'ed its own files read-only
        with contextlib.suppress(OSError):
            os.chmod(p, stat.S_IRWXU)
            func(p)

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=unlock)
    else:
        shutil.rmtree(path, onerror=unlock)


@dataclass
class Limits:
    timeout_s: float
    memory_mb: int | None = 8192
    # Only without a memory cgroup: RLIMIT_AS counts every mapping, which CUDA's huge virtual
    # reservations exceed at once; RLIMIT_DATA counts private writable memory only.
    memory_kind: str = "as"  # "as" or "data"
    pids: int = 512  # processes and threads of the whole run
    disk_mb: int = 1024  # the run's tmpfs (workdir, /tmp, /dev/shm each); also RLIMIT_FSIZE

    def cpu_seconds(self) -> int:  # timeout x cores: threads burn CPU faster than wall time
        return int(self.timeout_s * max(2, os.cpu_count() or 1)) + 5


def _child_setup(limits: Limits, cg: RunCgroup | None, nproc: int) -> Callable[[], None]:
    procs_files = cg.procs_files() if cg else []
    cgroup_memory = bool(cg and cg.memory_mb)
    cpu_s = limits.cpu_seconds()
    fsize = limits.disk_mb * 1024 * 1024

    def apply() -> None:  # runs in the child between fork and exec
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # if kbase is SIGKILLed, the run goes too
        if procs_files:
            join_in_child(procs_files)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        if limits.memory_mb and not cgroup_memory:
            kind = resource.RLIMIT_DATA if limits.memory_kind == "data" else resource.RLIMIT_AS
            nbytes = limits.memory_mb * 1024 * 1024
            resource.setrlimit(kind, (nbytes, nbytes))

    return apply


def _limits_row(
    limits: Limits, cg: RunCgroup | None, sandboxed: bool, userns: bool, nproc: int
) -> dict:
    kind = "DATA" if limits.memory_kind == "data" else "AS"
    scope = "run" if cg and cg.memory_mb else f"process (RLIMIT_{kind})"
    row: dict = {
        "wall_s": round(limits.timeout_s, 1),
        "cpu_s": limits.cpu_seconds(),
        "fsize_mb": limits.disk_mb,
        "nproc": nproc,
        # the kernel exempts host uid 0 from RLIMIT_NPROC, user namespace or not: the cgroup
        # counts. A sandboxed run of root's runs as nobody (validators/bwrap.py), which it binds.
        "nproc_enforced": os.geteuid() != 0 or (sandboxed and not userns),
        "cgroup": cg.version if cg else None,
        "memory_mb": limits.memory_mb,
        "memory_scope": scope if limits.memory_mb else None,
        "pids": cg.pids if cg else None,
    }
    if sandboxed:
        row |= {"disk_mb": limits.disk_mb, "userns": userns}
    return row


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
        with contextlib.suppress(json.JSONDecodeError):
            obj = json.loads(line)
            started = started or "child-pid" in obj
            if "exit-code" in obj:
                code = int(obj["exit-code"])
    code = rc if code is None else code
    # bwrap reports a child killed by signal N as exit status 128 + N
    if code is not None and 128 < code <= 128 + 64:
        code = -(code - 128)
    return code, started


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
    record: tuple[int, bytes],
) -> SandboxResult:
    lits = list(literals)
    out, err = Scanner(True, lits), Scanner(False, lits)

    def kill() -> int:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        n = cg.kill_all() if cg else 0
        if not sandboxed:
            n += kill_by_marker(MARKER, token)
        return n

    with _live_lock:
        _live[proc.pid] = kill
    pipes = ((proc.stdout, out), (proc.stderr, err))
    readers = [threading.Thread(target=pump, args=pipe, daemon=True) for pipe in pipes]
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
    rc, started = _decode_status(proc.returncode, _drain(status_r).decode("utf-8", "replace"))
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
    data = _drain(fd)
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
        with contextlib.suppress(OSError):  # BlockingIOError: empty now
            while chunk := os.read(fd, 65536):
                data += chunk
    return data


def _wait_exit(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait up to `timeout` s for the process to exit; True if it did. Popen.wait(timeout) polls
    with sleeps of up to 50 ms, most of the sandbox's cost per run; a pidfd wakes at the exit."""
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
