"""Run one untrusted command in the bubblewrap sandbox (validators/bwrap.py), with per-run limits
(validators/cgroup.py, rlimits), and always come back; without bubblewrap only when asked
(`--unsafe-no-sandbox`, CONTRIBUTING.md). The limits, host-side helpers and the watch over a
started run live in validators/sandbox_supervise.py; this module's names are the public ones.
"""

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
from typing import Any, ParamSpec

from kbase.validators import bwrap
from kbase.validators.cgroup import RunCgroup, stale_runs
from kbase.validators.sandbox_supervise import (
    MARKER,
    Limits,
    SandboxResult,
    _child_setup,
    _go,
    _limits_row,
    _supervise,
    rmtree,
    user_procs,
)

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


class SandboxUnavailable(Unavailable):
    """Snippets may not run: no working bubblewrap and no --unsafe-no-sandbox."""


def sandbox_status() -> tuple[bool, str]:
    """(bubblewrap sandbox available, why not)."""
    if os.environ.get("KBASE_SANDBOX") == "off":
        return False, "disabled by KBASE_SANDBOX=off"
    s = bwrap.support()
    return s.ok, s.why_not


def scrubbed_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: os.environ[k] for k in ENV_ALLOWLIST if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(extra)
    return env


def secret_paths() -> list[str]:
    """Files the snippet must never read even where the host is visible: the signing key."""
    out = []
    key = os.environ.get("KBASE_SIGNING_KEY")
    if key:
        out.append(os.path.realpath(key))
        # the sandbox hides the key by its path; another name of the same file would show it
        # to a snippet that runs as the key's owner (any host where kbase is not root)
        links = os.stat(key).st_nlink if os.path.exists(key) else 1
        if links > 1:
            raise OSError(
                f"KBASE_SIGNING_KEY {key} has {links} names (hard links); the sandbox hides one "
                "path only: remove the other links before running snippets"
            )
    return out


def _sweep_temp_dirs() -> None:
    """Remove the run folders a SIGKILLed kbase left (their names carry its pid)."""
    for d in stale_runs(Path(tempfile.gettempdir())):
        rmtree(d)


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

    env_for(workdir) gives the variables for the run (it is told the working directory as the
    snippet sees it). sandboxed=False is the `--unsafe-no-sandbox` path.

    `turn`: the run's turn on a shared resource (the GPU's device gate). The process starts at
    once, in its sandbox, and may prepare (the runner's bootstrap imports what the snippet will);
    one byte on its stdin says go, sent inside `turn()`, which is held until the run ends. The
    timeout and the reported duration count from go. `hardening`: see _bwrap_command.
    """
    if sandboxed:
        ok, why = sandbox_status()
        if not ok:
            raise SandboxUnavailable(why)
    token = uuid.uuid4().hex
    start = time.monotonic()
    cg = RunCgroup.create(limits.memory_mb, limits.pids)
    _sweep_temp_dirs()
    host_dir = Path(tempfile.mkdtemp(prefix=f"kbase-run-{os.getpid()}-"))
    status_r = -1
    nonce, nonce_r, record_r, record_w = _record_pipes()
    fds = [nonce_r, record_w]
    use_userns = False
    try:
        for name, text in files.items():
            (host_dir / name).write_text(text, encoding="utf-8")
        if sandboxed:
            status_r, status_w = os.pipe()
            fds.append(status_w)
            cmd, use_userns, row_extra = _bwrap_command(
                argv, host_dir, files, limits, gpu, userns, hardening, status_w, fds
            )
            cwd, inside = "/", bwrap.WORKDIR
        else:
            cmd, cwd, inside, row_extra = list(argv), str(host_dir), str(host_dir), {}
        fd_vars = {"KBASE_RECORD_FD": str(record_w), "KBASE_NONCE_FD": str(nonce_r)}
        env = scrubbed_env({**env_for(inside), MARKER: token, **fd_vars})
        # RLIMIT_NPROC counts per user: per run inside a fresh user namespace; in the host
        # namespace it counts all our processes, so the run gets that many more.
        nproc = limits.pids if use_userns else limits.pids + (0 if sandboxed else user_procs())
        limits_row = {**_limits_row(limits, cg, sandboxed, use_userns, nproc), **row_extra}
        proc = _start(cmd, cwd, env, fds, turn is not None, limits, cg, nproc)
        if isinstance(proc, OSError):
            return SandboxResult(
                None, "", "", time.monotonic() - start, False, sandboxed, 0,
                error=f"cannot start {cmd[0]}: {proc}", limits=limits_row,
            )  # fmt: skip
        with turn() if turn is not None else contextlib.nullcontext():
            if turn is not None:
                _go(proc)
                start = time.monotonic()
            return _supervise(
                proc, cg, token, sandboxed, limits, limits_row, literals, status_r,
                on_timeout_grace_s, start, (record_r, nonce),
            )  # fmt: skip
    finally:
        for fd in fds:
            os.close(fd)
        for fd in (status_r, record_r):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if cg is not None:
            cg.kill_all()
            cg.remove()
        rmtree(host_dir)


def _record_pipes() -> tuple[bytes, int, int, int]:
    """The completion record (validators/run_command.py): a nonce in, the same nonce back out.
    (nonce, its pipe's read end, the record pipe's read and write ends)."""
    nonce = secrets.token_hex(16).encode()
    nonce_r, nonce_w = os.pipe()
    os.write(nonce_w, nonce)
    os.close(nonce_w)
    record_r, record_w = os.pipe()
    return nonce, nonce_r, record_r, record_w


def _start(
    cmd: list[str],
    cwd: str,
    env: dict[str, str],
    fds: list[int],
    stdin: bool,
    limits: Limits,
    cg: RunCgroup | None,
    nproc: int,
) -> subprocess.Popen | OSError:
    """The run's process (or why it could not start); the fds it inherits are closed here."""
    cg_mem = bool(cg and cg.memory_mb)
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
            preexec_fn=_child_setup(limits, cg.procs_files() if cg else [], cg_mem, nproc),
        )
    except OSError as exc:
        return exc
    finally:
        for fd in fds:
            os.close(fd)
        fds.clear()


def _bwrap_command(
    argv: list[str],
    host_dir: Path,
    files: dict[str, str],
    limits: Limits,
    gpu: bool,
    userns: bool | None,
    hardening: tuple[bool, bool],
    status_w: int,
    fds: list[int],
) -> tuple[list[str], bool, dict[str, Any]]:
    """(the bwrap command line, in a user namespace, what the ledger row's limits add: the
    snippet's host uid, whether unix sockets are refused). The fds the child inherits go into
    `fds`.

    `hardening`: (run as nobody when root, refuse unix sockets). Both stay on except where the GPU
    tier's preflight found that this machine's CUDA driver cannot start with one of them
    (tiers.cuda_preflight); the row's limits say which were in force."""
    as_nobody, socket_filter = hardening
    s = bwrap.support()
    use_userns = s.userns if userns is None else (userns and s.userns)
    dropping = as_nobody and bool(bwrap.drop_root())
    use_userns = use_userns and not dropping  # root: setpriv to nobody
    opened = {name: os.open(host_dir / name, os.O_RDONLY) for name in files}
    fds += opened.values()
    seccomp_fd = None
    prog = bwrap.unix_socket_filter() if socket_filter else None
    if prog is not None:  # a few hundred bytes: the pipe holds them until bwrap reads
        seccomp_fd, prog_w = os.pipe()
        os.write(prog_w, prog)
        os.close(prog_w)
        fds.append(seccomp_fd)
    cmd = bwrap.command(
        argv,
        opened,
        userns=use_userns,
        disk_mb=limits.disk_mb,
        gpu=gpu,
        status_fd=status_w,
        secrets=secret_paths(),
        exe=s.exe or "bwrap",
        seccomp_fd=seccomp_fd,
        as_nobody=as_nobody,
    )
    # the snippet's host uid: RUN_AS when root could drop to it
    row = {
        "run_as": bwrap.RUN_AS if dropping else os.geteuid(),
        # allowed only where CUDA needs it, and then no host socket file is visible
        "unix_sockets": "refused" if prog is not None else "host files covered",
    }
    return cmd, use_userns, row
