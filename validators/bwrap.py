"""The bubblewrap command line that a snippet runs under, and whether this machine can run it.

What the snippet gets: new user (where the kernel allows it), PID, network, IPC and UTS
namespaces; the host filesystem read-only; private tmpfs for /tmp, /var/tmp, /run, /dev/shm and
every home directory, with only the interpreter and toolchain paths bound back (read-only); a
minimal /dev; its own working directory, a size-limited tmpfs holding copies of the snippet
files; no capabilities; a new session (no TIOCSTI into our terminal); and death with its parent.
The runner stays outside the PID namespace, so the snippet cannot see, signal or stop it.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

WORKDIR = "/tmp/kbase-run"  # the snippet's cwd and HOME inside the sandbox
SANDBOX_UID = 1000  # what the snippet sees as its uid when a user namespace is used
# Home directories hide credentials (ssh agent sockets, cloud tokens, the signing key); they are
# replaced by empty tmpfs and only the paths the snippet needs to run are bound back.
MASKED_DIRS = ("/root", "/home")


@dataclass(frozen=True)
class BwrapSupport:
    exe: str | None
    userns: bool  # a user namespace can be created (with it, RLIMIT_NPROC counts per run)
    why_not: str = ""  # empty when bwrap works at all

    @property
    def ok(self) -> bool:
        return self.exe is not None and not self.why_not


def _probe(exe: str, userns: bool) -> str:
    argv = [exe, *_ns_flags(userns), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    try:
        p = subprocess.run([*argv, "--", "true"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return "" if p.returncode == 0 else (p.stderr.strip() or f"exit {p.returncode}")


@functools.cache
def support() -> BwrapSupport:
    """Probed once per process: is bwrap installed, and may it create the namespaces we need."""
    exe = os.environ.get("KBASE_BWRAP") or shutil.which("bwrap")
    if not exe:
        return BwrapSupport(None, False, "bubblewrap (bwrap) is not installed")
    why = _probe(exe, True)
    if not why:
        return BwrapSupport(exe, True)
    # as root, bwrap can make the other namespaces without a user namespace
    why_root = _probe(exe, False) if os.geteuid() == 0 else why
    if not why_root:
        return BwrapSupport(exe, False)
    return BwrapSupport(exe, False, f"bwrap cannot create namespaces here: {why}")


def _ns_flags(userns: bool) -> list[str]:
    flags = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
    flags += ["--unshare-cgroup-try", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if userns:
        flags = ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), *flags]
    return flags


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def needed_paths() -> list[str]:
    """Paths the snippet must read even when they live in a masked home directory."""
    cands = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)}
    cands |= {os.path.dirname(os.path.realpath(sys.executable))}
    cands |= {p for p in sys.path if p}
    cands |= {p for p in os.environ.get("PATH", "").split(os.pathsep) if p}
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "VIRTUAL_ENV", "CONDA_PREFIX"):
        if os.environ.get(var):
            cands.add(os.environ[var])
    from kbase.validators.pycache import prefix

    cache = prefix()
    if cache:  # the runner's bytecode cache, read-only like every path here
        cands.add(cache)
    real = sorted({os.path.realpath(p) for p in cands if os.path.isdir(p)} | cands)
    return [p for p in real if os.path.isdir(p) and os.path.isabs(p)]


def _keep_under(masked: str, paths: list[str], secrets: list[str]) -> list[str]:
    inside = sorted(p for p in paths if _under(p, masked) and p != masked)
    kept: list[str] = []
    for p in inside:
        if any(_under(p, k) for k in kept):
            continue
        if any(_under(s, p) for s in secrets):
            continue  # never bind back a folder that holds a secret; the snippet goes without
        kept.append(p)
    return kept


def gpu_device_nodes() -> list[str]:
    nodes = sorted(glob.glob("/dev/nvidia*"))
    return [n for n in nodes if os.path.exists(n)]


def command(
    argv: list[str],
    files: dict[str, int],
    *,
    userns: bool,
    disk_mb: int,
    gpu: bool,
    status_fd: int,
    secrets: list[str],
    exe: str,
) -> list[str]:
    """The full bwrap argv. `files`: name in the workdir -> an open fd whose content it gets."""
    size = str(disk_mb * 1024 * 1024)
    cmd = [exe, *_ns_flags(userns), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    cmd += ["--size", size, "--tmpfs", "/dev/shm", "--tmpfs", "/run", "--tmpfs", "/var/tmp"]
    paths = needed_paths()
    home = os.path.expanduser("~")
    masked = [d for d in dict.fromkeys([*MASKED_DIRS, home]) if os.path.isdir(d) and d != "/"]
    # a home folder inside another masked one is hidden already
    masked = [d for d in masked if not any(d != o and _under(d, o) for o in masked)]
    for d in masked:
        cmd += ["--tmpfs", d]
        for keep in _keep_under(d, paths, secrets):
            cmd += ["--ro-bind", keep, keep]
    for s in secrets:  # e.g. the signing key, wherever it lives
        if os.path.exists(s) and not any(_under(s, d) for d in masked):
            cmd += ["--ro-bind", "/dev/null", s] if os.path.isfile(s) else ["--tmpfs", s]
    cmd += ["--size", size, "--tmpfs", "/tmp", "--dir", WORKDIR]
    # an interpreter or virtual environment that lives under /tmp (CI checkouts often do) comes
    # back read-only; nothing else of the host's /tmp does
    for keep in _keep_under("/tmp", paths, secrets):
        if not _under(WORKDIR, keep) and not _under(keep, WORKDIR):
            cmd += ["--ro-bind", keep, keep]
    for name, fd in files.items():
        cmd += ["--file", str(fd), f"{WORKDIR}/{name}"]
    if gpu:
        for node in gpu_device_nodes():
            # device nodes need read-write opens for CUDA's ioctls; a read-only mount does not
            # restrict device I/O anyway. Driver libraries come from the read-only root.
            cmd += ["--dev-bind", node, node]
    cmd += ["--chdir", WORKDIR, "--json-status-fd", str(status_fd), "--", *argv]
    return cmd
