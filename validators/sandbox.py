"""Run one untrusted command in the bubblewrap sandbox (validators/bwrap.py), with per-run limits
(validators/cgroup.py, rlimits), and always come back; without bubblewrap only when asked
(`--unsafe-no-sandbox`, CONTRIBUTING.md). The limits, host-side helpers and the watch over a
started run live in validators/sandbox_supervise.py; this module's names are the public ones."""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import ParamSpec

from kbase.validators import bwrap
from kbase.validators import sandbox_supervise as sup
from kbase.validators.cgroup import RunCgroup, stale_runs
from kbase.validators.sandbox_supervise import Limits, SandboxResult

from kbase.errors import Unavailable

# Variables a snippet may inherit: toolchain locations and locale, never tokens or credentials.
# CC and CXX: Triton builds its CUDA driver stub with the host compiler on first GPU use.
ENV_ALLOWLIST = tuple(
    """PATH LANG LC_ALL LC_CTYPE TZ CUDA_HOME CUDA_PATH CUDA_ROOT LD_LIBRARY_PATH VIRTUAL_ENV
    CONDA_PREFIX NVIDIA_VISIBLE_DEVICES NVIDIA_DRIVER_CAPABILITIES CUDA_VISIBLE_DEVICES
    CUDA_DEVICE_ORDER TRITON_PTXAS_PATH TRITON_CUOBJDUMP_PATH TRITON_NVDISASM_PATH
    TRITON_LIBCUDA_PATH TRITON_DEFAULT_FP_FUSION OMP_NUM_THREADS MKL_NUM_THREADS CC CXX""".split()
)


class SandboxUnavailable(Unavailable):
    """Snippets may not run: no working bubblewrap and no --unsafe-no-sandbox."""


def sandbox_status() -> tuple[bool, str]:
    """(bubblewrap sandbox available, why not)."""
    if os.environ.get("KBASE_SANDBOX") == "off":
        return False, "disabled by KBASE_SANDBOX=off"
    s = bwrap.support()
    return s.ok, s.why_not


def scrubbed_env(extra: dict[str, str]) -> dict[str, str]:
    inherited = {k: os.environ[k] for k in ENV_ALLOWLIST if k in os.environ}
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", **inherited, **extra}


P = ParamSpec("P")


def _retry_vanished(run: Callable[P, SandboxResult]) -> Callable[P, SandboxResult]:
    """The run again, after a fresh scan, when a host socket file it was to cover vanished
    between the scan and bwrap's mounts (the gpu tier with unix sockets allowed, bwrap.command):
    such a run failed before the snippet started."""

    @functools.wraps(run)
    def again(*args: P.args, **kw: P.kwargs) -> SandboxResult:
        res = run(*args, **kw)
        if res.returncode == 1 and not res.completed and res.stderr.startswith(bwrap.VANISHED):
            bwrap.host_socket_files.cache_clear()
            res = run(*args, **kw)
        return res

    return again


@_retry_vanished
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
    hardening: tuple[bool, bool] = (True, True),
) -> SandboxResult:
    """Run argv with `files` in a fresh working directory; always returns, never leaves a process.
    env_for(workdir) gives the run's variables (told the working directory as the snippet sees
    it); sandboxed=False is the `--unsafe-no-sandbox` path. `turn`: the run's turn on a shared
    resource (the GPU's device gate): the process starts at once, in its sandbox, and may prepare
    (the runner's bootstrap imports what the snippet will); one byte on its stdin, sent inside
    `turn()` (held until the run ends), says go; the timeout and the duration count from go.
    `hardening`: see bwrap.command."""
    if sandboxed:
        ok, why = sandbox_status()
        if not ok:
            raise SandboxUnavailable(why)
    token = uuid.uuid4().hex
    start = time.monotonic()
    cg = RunCgroup.create(limits.memory_mb, limits.pids)
    for stale in stale_runs(Path(tempfile.gettempdir())):  # the run folders of a SIGKILLed kbase
        sup.rmtree(stale)
    host_dir = Path(tempfile.mkdtemp(prefix=f"kbase-run-{os.getpid()}-"))
    # the completion record (validators/run_command.py): a nonce in, the same nonce back out
    nonce = secrets.token_hex(16).encode()
    nonce_r = bwrap.pipe_holding(nonce)
    record_r, record_w = os.pipe()
    fds, status_r, use_userns = [nonce_r, record_w], -1, False
    try:
        for name, text in files.items():
            (host_dir / name).write_text(text, encoding="utf-8")
        if sandboxed:
            status_r, status_w = os.pipe()
            fds.append(status_w)
            cmd, use_userns, row_extra = bwrap.command(
                argv, host_dir, files, limits.disk_mb, gpu, userns, hardening, status_w, fds
            )
            cwd, inside = "/", bwrap.WORKDIR
        else:
            cmd, cwd, inside, row_extra = list(argv), str(host_dir), str(host_dir), {}
        fd_vars = {"KBASE_RECORD_FD": str(record_w), "KBASE_NONCE_FD": str(nonce_r)}
        env = scrubbed_env({**env_for(inside), sup.MARKER: token, **fd_vars})
        # RLIMIT_NPROC counts per user: per run inside a fresh user namespace; in the host
        # namespace it counts all our processes, so the run gets that many more.
        nproc = limits.pids if use_userns else limits.pids + (0 if sandboxed else sup.user_procs())
        limits_row = {**sup._limits_row(limits, cg, sandboxed, use_userns, nproc), **row_extra}
        proc = _start(cmd, cwd, env, fds, turn is not None, sup._child_setup(limits, cg, nproc))
        if isinstance(proc, OSError):
            return SandboxResult(
                None, "", "", time.monotonic() - start, False, sandboxed, 0,
                error=f"cannot start {cmd[0]}: {proc}", limits=limits_row,
            )  # fmt: skip
        with turn() if turn is not None else contextlib.nullcontext():
            if turn is not None:  # go; a run that already ended is the supervisor's to report
                with contextlib.suppress(OSError, ValueError):
                    assert proc.stdin is not None
                    proc.stdin.write(b"g")
                    proc.stdin.close()
                start = time.monotonic()
            return sup._supervise(
                proc, cg, token, sandboxed, limits, limits_row, literals, status_r,
                on_timeout_grace_s, start, (record_r, nonce),
            )  # fmt: skip
    finally:
        for fd in [*fds, status_r, record_r]:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if cg is not None:
            cg.kill_all()
            cg.remove()
        sup.rmtree(host_dir)


def _start(
    cmd: list[str], cwd: str, env: dict[str, str], fds: list[int], stdin: bool, preexec: Callable
) -> subprocess.Popen | OSError:
    """The run's process (or why it could not start); the fds it inherits are closed here."""
    try:
        return subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=fds,
            preexec_fn=preexec,
        )
    except OSError as exc:
        return exc
    finally:
        for fd in fds:
            os.close(fd)
        fds.clear()
