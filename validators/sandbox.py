"""Run one untrusted command in the bubblewrap sandbox, with per-run limits, and always come back.

The sandbox (validators/bwrap.py) is the security boundary: the snippet sees a read-only host,
private temp and home directories, no network, no other process, and a copy of its own files in
a size-limited tmpfs that vanishes with it. Limits hold per run: a cgroup (validators/cgroup.py)
caps memory and process count for the run as a whole where the machine allows it, and
RLIMIT_NPROC/FSIZE/CPU are set on every run. The result says which limits were in force.

Without bubblewrap (or user namespaces for a non-root user) snippets may only run when the
caller asks for it explicitly (`--unsafe-no-sandbox`): then they run in a host temp directory
with rlimits and a scrubbed environment, `isolated` is False, and such runs never verify a skill.
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from kbase.validators import bwrap
from kbase.validators.capture import Scanner, pump
from kbase.validators.cgroup import RunCgroup, join_in_child
from kbase.validators.hostproc import kill_by_marker, libc_prctl_deathsig, rmtree, user_procs

from kbase.errors import Unavailable

# Variables a snippet may inherit: toolchain locations and locale, never tokens or credentials.
ENV_ALLOWLIST = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_ROOT",
    "LD_LIBRARY_PATH",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "TRITON_PTXAS_PATH",
    "TRITON_CUOBJDUMP_PATH",
    "TRITON_NVDISASM_PATH",
    "TRITON_LIBCUDA_PATH",
    "TRITON_DEFAULT_FP_FUSION",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "CC",
    "CXX",  # Triton builds its CUDA driver stub with the host compiler on first GPU use
)
MARKER = "KBASE_SANDBOX_ID"


@dataclass
class Limits:
    timeout_s: float
    memory_mb: int | None = 8192
    # Only without a memory cgroup: RLIMIT_AS counts every mapping, which CUDA's huge virtual
    # reservations exceed at once; RLIMIT_DATA counts private writable memory only.
    memory_kind: str = "as"  # "as" or "data"
    cpu_s: int | None = None  # default: timeout x cores (threads burn CPU faster than wall time)
    pids: int = 512  # processes and threads of the whole run
    disk_mb: int = 1024  # the run's tmpfs (workdir, /tmp, /dev/shm each); also RLIMIT_FSIZE

    def cpu_seconds(self) -> int:
        return self.cpu_s or int(self.timeout_s * max(2, os.cpu_count() or 1)) + 5


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

    @property
    def signal_name(self) -> str:
        if self.returncode is None or self.returncode >= 0:
            return ""
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"


class SandboxUnavailable(Unavailable):
    """Snippets may not run: no working bubblewrap and no --unsafe-no-sandbox."""


def sandbox_status() -> tuple[bool, str]:
    """(bubblewrap sandbox available, why not)."""
    if os.environ.get("KBASE_SANDBOX") == "off":
        return False, "disabled by KBASE_SANDBOX=off"
    s = bwrap.support()
    return s.ok, s.why_not


def scrubbed_env(extra: dict[str, str], source: Mapping[str, str] | None = None) -> dict[str, str]:
    src: Mapping[str, str] = os.environ if source is None else source
    env = {k: src[k] for k in ENV_ALLOWLIST if k in src}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(extra)
    return env


def secret_paths() -> list[str]:
    """Files the snippet must never read even where the host is visible: the signing key."""
    out = []
    key = os.environ.get("KBASE_SIGNING_KEY")
    if key:
        out.append(os.path.realpath(key))
    return out


# Runs in flight, so that an interrupted kbase (Ctrl-C, SIGTERM from CI) can take them down too.
_live: dict[int, Callable[[], int]] = {}
_live_lock = threading.Lock()


def kill_all_live() -> int:
    with _live_lock:
        running = list(_live.values())
    return sum(k() for k in running)


def _child_setup(limits: Limits, procs_files: list[str], cgroup_memory: bool, nproc: int):
    cpu_s = limits.cpu_seconds()
    fsize = limits.disk_mb * 1024 * 1024

    def apply() -> None:  # runs in the child between fork and exec
        libc_prctl_deathsig()  # if kbase itself is SIGKILLed, the run goes too
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


def run_sandboxed(
    argv: list[str],
    files: dict[str, str],
    limits: Limits,
    env_for: Callable[[str], dict[str, str]],
    *,
    sandboxed: bool = True,
    gpu: bool = False,
    userns: bool | None = None,
    literals: Iterable[str] = (),
    on_timeout_grace_s: float = 0.0,
    turn: Callable[[], AbstractContextManager] | None = None,
) -> SandboxResult:
    """Run argv with `files` in a fresh working directory; always returns, never leaves a process.

    env_for(workdir) gives the variables for the run (it is told the working directory as the
    snippet sees it). sandboxed=False is the `--unsafe-no-sandbox` path.

    `turn`: the run's turn on a shared resource (the GPU's device gate). The process starts at
    once, in its sandbox, and may prepare (the runner's bootstrap imports what the snippet will);
    one byte on its stdin says go, sent inside `turn()`, which is held until the run ends. The
    timeout and the reported duration count from go.
    """
    if sandboxed:
        ok, why = sandbox_status()
        if not ok:
            raise SandboxUnavailable(why)
    token = uuid.uuid4().hex
    start = time.monotonic()
    cg = RunCgroup.create(limits.memory_mb, limits.pids)
    host_dir = Path(tempfile.mkdtemp(prefix="kbase-run-"))
    fds: list[int] = []
    status_r = status_w = -1
    use_userns = False
    try:
        for name, text in files.items():
            (host_dir / name).write_text(text, encoding="utf-8")
        if sandboxed:
            s = bwrap.support()
            use_userns = s.userns if userns is None else (userns and s.userns)
            opened = {name: os.open(host_dir / name, os.O_RDONLY) for name in files}
            fds += opened.values()
            status_r, status_w = os.pipe()
            fds.append(status_w)
            cmd = bwrap.command(
                argv,
                opened,
                userns=use_userns,
                disk_mb=limits.disk_mb,
                gpu=gpu,
                status_fd=status_w,
                secrets=secret_paths(),
                exe=s.exe or "bwrap",
            )
            cwd, inside = "/", bwrap.WORKDIR
        else:
            cmd, cwd, inside = list(argv), str(host_dir), str(host_dir)
        env = scrubbed_env({**env_for(inside), MARKER: token})
        # RLIMIT_NPROC counts per user: per run inside a fresh user namespace; in the host
        # namespace it counts all our processes, so the run gets that many more.
        nproc = limits.pids if use_userns else limits.pids + (0 if sandboxed else user_procs())
        limits_row = _limits_row(limits, cg, sandboxed, use_userns, nproc)
        cg_mem = bool(cg and cg.memory_mb)
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                env=env,
                stdin=subprocess.PIPE if turn else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                pass_fds=fds,
                preexec_fn=_child_setup(limits, cg.procs_files() if cg else [], cg_mem, nproc),
            )
        except OSError as exc:
            return SandboxResult(
                None, "", "", time.monotonic() - start, False, sandboxed, 0,
                error=f"cannot start {cmd[0]}: {exc}", limits=limits_row,
            )  # fmt: skip
        finally:
            for fd in fds:
                os.close(fd)
            fds.clear()
        if turn is None:
            return _supervise(
                proc, cg, token, sandboxed, limits, limits_row, literals, status_r,
                on_timeout_grace_s, start,
            )  # fmt: skip
        with turn():
            _go(proc)
            return _supervise(
                proc, cg, token, sandboxed, limits, limits_row, literals, status_r,
                on_timeout_grace_s, time.monotonic(),
            )  # fmt: skip
    finally:
        for fd in fds:
            os.close(fd)
        if status_r >= 0:
            try:
                os.close(status_r)
            except OSError:
                pass
        if cg is not None:
            cg.kill_all()
            cg.remove()
        rmtree(host_dir)


def _go(proc: subprocess.Popen) -> None:
    """Tell a waiting run to start; a run that already ended is the supervisor's to report."""
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"g")
        proc.stdin.close()
    except (BrokenPipeError, OSError, ValueError):
        pass


def _limits_row(
    limits: Limits, cg: RunCgroup | None, sandboxed: bool, userns: bool, nproc: int
) -> dict:
    row: dict = {
        "wall_s": round(limits.timeout_s, 1),
        "cpu_s": limits.cpu_seconds(),
        "fsize_mb": limits.disk_mb,
        "nproc": nproc,
        # the kernel exempts host uid 0 from RLIMIT_NPROC, user namespace or not: the cgroup counts
        "nproc_enforced": os.geteuid() != 0,
        "cgroup": cg.version if cg else None,
        "memory_mb": limits.memory_mb,
        "memory_scope": None,
        "pids": cg.pids if cg else None,
    }
    if limits.memory_mb:
        if cg and cg.memory_mb:
            row["memory_scope"] = "run"
        else:
            kind = "DATA" if limits.memory_kind == "data" else "AS"
            row["memory_scope"] = f"process (RLIMIT_{kind})"
    if sandboxed:
        row["disk_mb"] = limits.disk_mb
        row["userns"] = userns
    return row


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
    status = b""
    if status_r >= 0:
        os.set_blocking(status_r, False)
        try:
            while chunk := os.read(status_r, 65536):
                status += chunk
        except (BlockingIOError, OSError):
            pass
    rc, started = _decode_status(proc.returncode, status.decode("utf-8", "replace"))
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
    )


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
