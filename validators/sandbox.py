"""Run one untrusted command with limits, a scrubbed environment and, where possible, no network.

The limits are a hygiene barrier for code written by colleagues, not a security boundary: a
snippet runs with our uid. What it does guarantee: the run ends by the deadline, everything it
started dies with it (even children that called setsid), it sees no credentials from our
environment, it cannot reach the network when user namespaces are available, and a runaway
allocation hits a limit instead of the machine's OOM killer.
"""

from __future__ import annotations

import ctypes
import functools
import os
import resource
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

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
TAIL_CHARS = 4000


@dataclass
class Limits:
    timeout_s: float
    memory_mb: int | None = 8192
    # RLIMIT_AS counts every mapping, which CUDA's huge virtual reservations exceed at once;
    # RLIMIT_DATA counts only private writable memory, so it still stops a host-side bomb.
    memory_kind: str = "as"  # "as" or "data"
    cpu_s: int | None = None  # default: timeout x cores (threads burn CPU faster than wall time)


@dataclass
class SandboxResult:
    returncode: int | None  # negative: killed by that signal; None: never started
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool
    isolated: bool  # ran inside a fresh network namespace
    orphans_killed: int
    error: str = ""

    @property
    def signal_name(self) -> str:
        if self.returncode is None or self.returncode >= 0:
            return ""
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"


@functools.cache
def network_isolation() -> tuple[bool, str]:
    """(available, why not). Probed once: `unshare -rn` needs unprivileged user namespaces."""
    mode = os.environ.get("KBASE_SANDBOX_NET", "auto")
    if mode == "off":
        return False, "disabled by KBASE_SANDBOX_NET=off"
    exe = shutil.which("unshare")
    if exe is None:
        return False, "unshare(1) is not installed"
    try:
        probe = subprocess.run([exe, "-rn", "true"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"unshare -rn failed: {exc}"
    if probe.returncode != 0:
        return False, "unprivileged user namespaces are not allowed here: " + (
            probe.stderr.strip() or f"exit {probe.returncode}"
        )
    return True, ""


def scrubbed_env(extra: dict[str, str], source: Mapping[str, str] | None = None) -> dict[str, str]:
    src: Mapping[str, str] = os.environ if source is None else source
    env = {k: src[k] for k in ENV_ALLOWLIST if k in src}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(extra)
    return env


_PR_SET_PDEATHSIG = 1
_libc: ctypes.CDLL | None
try:
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:  # not glibc-like; the registry below still cleans up on a normal exit
    _libc = None

# Runs in flight, so that an interrupted kbase (Ctrl-C, SIGTERM from CI) can take them down too.
_live: dict[int, str] = {}
_live_lock = threading.Lock()


def kill_all_live() -> int:
    with _live_lock:
        running = list(_live.items())
    return sum(_kill_everything(pgid, token) for pgid, token in running)


def _limit_setter(limits: Limits):
    ncpu = os.cpu_count() or 1
    cpu_s = limits.cpu_s or int(limits.timeout_s * max(2, ncpu)) + 5

    def apply() -> None:  # runs in the child between fork and exec: plain syscalls only
        if _libc is not None:
            _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # if kbase itself is SIGKILLed
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if limits.memory_mb:
            kind = resource.RLIMIT_DATA if limits.memory_kind == "data" else resource.RLIMIT_AS
            nbytes = limits.memory_mb * 1024 * 1024
            resource.setrlimit(kind, (nbytes, nbytes))

    return apply


def _pids_with_marker(token: str) -> list[int]:
    """Processes whose environment carries our per-run marker: the run and anything it spawned."""
    needle = f"{MARKER}={token}".encode()
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


def _kill_everything(pgid: int, token: str) -> int:
    """SIGKILL the process group, then hunt down escapees (setsid, double fork) by marker."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    killed = 0
    for _ in range(20):  # a fork bomb may spawn new ones while we kill; a few sweeps settle it
        pids = _pids_with_marker(token)
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


def _reader(stream, sink: list[bytes], cap: int) -> None:
    # Keep only the head and a rolling tail so a snippet printing gigabytes cannot exhaust us.
    size = 0
    for chunk in iter(lambda: stream.read(65536), b""):
        sink.append(chunk)
        size += len(chunk)
        if size > cap * 4:
            joined = b"".join(sink)
            sink[:] = [joined[:cap], b"\n[... output truncated ...]\n", joined[-cap:]]
            size = sum(len(c) for c in sink)
    stream.close()


def run_sandboxed(
    argv: list[str],
    cwd: Path,
    limits: Limits,
    env_extra: dict[str, str],
    *,
    isolate: bool = True,
    on_timeout_grace_s: float = 0.0,
) -> SandboxResult:
    """Run argv in cwd with the limits; always returns, never leaves a process behind."""
    token = uuid.uuid4().hex
    env = scrubbed_env({**env_extra, MARKER: token})
    use_ns, _why = network_isolation() if isolate else (False, "")
    cmd = ["unshare", "-rn", *argv] if use_ns else list(argv)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_limit_setter(limits),
        )
    except OSError as exc:
        return SandboxResult(
            None,
            "",
            "",
            time.monotonic() - start,
            False,
            use_ns,
            0,
            error=f"cannot start {argv[0]}: {exc}",
        )
    with _live_lock:
        _live[proc.pid] = token
    out: list[bytes] = []
    err: list[bytes] = []
    readers = [
        threading.Thread(target=_reader, args=(proc.stdout, out, 1 << 20), daemon=True),
        threading.Thread(target=_reader, args=(proc.stderr, err, 1 << 20), daemon=True),
    ]
    for t in readers:
        t.start()
    timed_out = False
    try:
        proc.wait(timeout=limits.timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        if on_timeout_grace_s > 0:
            # let the snippet's own watchdog print where it is stuck before we pull the plug
            try:
                proc.wait(timeout=on_timeout_grace_s)
            except subprocess.TimeoutExpired:
                pass
    orphans = _kill_everything(proc.pid, token)
    proc.wait()
    with _live_lock:
        _live.pop(proc.pid, None)
    duration = time.monotonic() - start
    for t in readers:
        t.join(timeout=5)
    return SandboxResult(
        returncode=proc.returncode,
        stdout=b"".join(out).decode("utf-8", "replace"),
        stderr=b"".join(err).decode("utf-8", "replace"),
        duration_s=duration,
        timed_out=timed_out,
        isolated=use_ns,
        orphans_killed=orphans,
    )


def tail(text: str, n: int = TAIL_CHARS) -> str:
    return text if len(text) <= n else "..." + text[-n:]
