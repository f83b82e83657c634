"""The bubblewrap command line that a snippet runs under (what it gets: CONTRIBUTING.md, "Check it
locally"), and whether this machine can run it. Beyond that list: a minimal /dev, no
capabilities, a new session (no TIOCSTI into our terminal), and every writable mount a tmpfs of
bounded size (MASK_MB for the masking ones).

When kbase runs as root, a user namespace would map the snippet to host root: it could read
root-only files (/etc/shadow, a 0600 signing key by any of its links) and connect to root's
socket files. So as root bwrap runs without one, and the command starts under setpriv as
`nobody` (RUN_AS), after the mounts are made; the snippet keeps no capability."""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import platform
import shutil
import stat
import struct
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WORKDIR = "/tmp/kbase-run"  # the snippet's cwd and HOME inside the sandbox
SANDBOX_UID = 1000  # what the snippet sees as its uid when a user namespace is used
# Home directories hide credentials (ssh agent sockets, cloud tokens, the signing key); they are
# replaced by empty tmpfs and only the paths the snippet needs to run are bound back.
MASKED_DIRS = ("/root", "/home")
MASK_MB = 8  # the tmpfs over /run, /root, /home and masked secret folders
RUN_AS = 65534  # the snippet's host uid and gid when kbase runs as root (nobody)


@functools.cache
def drop_root() -> list[str]:
    """The setpriv prefix that runs the snippet as RUN_AS when we are root; [] when we are not,
    or when this machine cannot (no setpriv, or bwrap cannot make namespaces without a user
    namespace, as in an unprivileged container): runs then keep the user-namespace mapping to
    root, and their rows say `run_as: 0`. Probed once per process."""
    if os.geteuid() != 0:
        return []
    exe = shutil.which("setpriv")
    bw = os.environ.get("KBASE_BWRAP") or shutil.which("bwrap")
    if exe is None or bw is None:
        return []
    prefix = [exe, f"--reuid={RUN_AS}", f"--regid={RUN_AS}", "--clear-groups", "--inh-caps=-all"]
    prefix.append("--")
    caps = ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return [] if _probe(bw, False, caps, prefix) else prefix


@dataclass(frozen=True)
class BwrapSupport:
    exe: str | None
    userns: bool  # a user namespace can be created (with it, RLIMIT_NPROC counts per run)
    why_not: str = ""  # empty when bwrap works at all

    @property
    def ok(self) -> bool:
        return self.exe is not None and not self.why_not


def _probe(exe: str, userns: bool, caps: Sequence[str] = (), prefix: Sequence[str] = ()) -> str:
    """Why bwrap cannot start `true` (under `prefix`) with these namespaces; "" when it can."""
    argv = [exe, *_ns_flags(userns), *caps, "--ro-bind", "/", "/", "--proc", "/proc"]
    argv += ["--dev", "/dev", "--", *prefix, "true"]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=20)
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
    return BwrapSupport(exe, False, why_root and f"bwrap cannot create namespaces here: {why}")


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
    env_dirs = ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT", "VIRTUAL_ENV", "CONDA_PREFIX")
    cands |= {os.environ[v] for v in env_dirs if os.environ.get(v)}
    from kbase.validators.run_command import pycache_prefix

    if cache := pycache_prefix():  # the runner's bytecode cache, read-only like every path here
        cands.add(cache)
    real = sorted({os.path.realpath(p) for p in cands if os.path.isdir(p)} | cands)
    return [p for p in real if os.path.isdir(p) and os.path.isabs(p)]


def _keep_under(masked: str, paths: list[str], secrets: list[str]) -> list[str]:
    inside = sorted(p for p in paths if _under(p, masked) and p != masked)
    kept: list[str] = []
    for p in inside:  # never bind back a folder that holds a secret; the snippet goes without
        if not any(_under(p, k) for k in kept) and not any(_under(s, p) for s in secrets):
            kept.append(p)
    return kept


# A unix socket file anywhere on the read-only host (an agent's, a daemon's) is connectable to
# whoever may write it; the network namespace stops abstract and IP sockets only. So the snippet
# may not create AF_UNIX sockets at all (socketpair() still works): a seccomp filter, loaded by
# bwrap, fails socket(AF_UNIX, ...) with EACCES. io_uring (which can make sockets past seccomp)
# and any other syscall ABI than the native one are refused too.
# machine -> (AUDIT_ARCH, __NR_socket, __NR_io_uring_setup)
_SECCOMP_ABI = {"x86_64": (0xC000003E, 41, 425), "aarch64": (0xC00000B7, 198, 425)}


def unix_socket_filter() -> bytes | None:
    """The classic-BPF seccomp program (struct sock_filter[]), or None on another machine."""
    abi = _SECCOMP_ABI.get(platform.machine())
    if abi is None:
        return None
    arch, nr_socket, nr_uring = abi
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, deny = 0x7FFF0000, 0x00050000 | 13  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EACCES
    prog = [
        (ld, 0, 0, 4),  # 0: arch
        (jeq, 0, 7, arch),  # 1: another ABI -> deny
        (ld, 0, 0, 0),  # 2: syscall number
        (jeq, 2, 0, nr_socket),  # 3: socket -> 6
        (jeq, 4, 0, nr_uring),  # 4: io_uring_setup -> deny
        (jge, 3, 2, 0x40000000),  # 5: x32 ABI -> deny, else allow
        (ld, 0, 0, 16),  # 6: socket's domain (low word of args[0])
        (jeq, 1, 0, 1),  # 7: AF_UNIX -> deny
        (ret, 0, 0, allow),  # 8
        (ret, 0, 0, deny),  # 9
    ]
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


# Where the GPU tier must leave socket(AF_UNIX) allowed (a CUDA driver that opens one in cuInit
# and fails with 304 whatever errno the filter gives), no host socket file may stay connectable:
# each one the read-only root shows is covered with /dev/null. The network namespace already
# isolates abstract sockets. Scanned once per process (about a second for ~170k entries); a
# socket created on the host after the scan is the remaining gap.
_VIRTUAL = ("/proc", "/sys", "/dev")


@functools.cache
def host_socket_files(hidden: tuple[str, ...], shown: tuple[str, ...]) -> tuple[str, ...]:
    """Socket files under / that a snippet could see: not in `hidden` (virtual file systems and
    the folders the sandbox covers with a tmpfs) unless inside `shown` (paths bound back)."""
    skip = set(_VIRTUAL) | set(hidden)
    found: list[str] = []
    stack = ["/", *[p for p in shown if any(_under(p, h) for h in hidden)]]
    while stack:
        top = stack.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for e in entries:
            with contextlib.suppress(OSError):
                if e.is_dir(follow_symlinks=False):
                    if e.path not in skip:
                        stack.append(e.path)
                elif not e.is_file(follow_symlinks=False) and not e.is_symlink():
                    if stat.S_ISSOCK(e.stat(follow_symlinks=False).st_mode):
                        found.append(e.path)
    return tuple(sorted(found))


def live_sockets(paths: tuple[str, ...]) -> list[str]:
    """The scanned socket files that still exist: bwrap cannot cover a vanished one (it would
    have to create the file on the read-only root, and the run fails)."""
    out = []
    for p in paths:
        with contextlib.suppress(OSError):
            if stat.S_ISSOCK(os.lstat(p).st_mode):
                out.append(p)
    return out


VANISHED = "bwrap: Can't create file at "  # how bwrap fails when a covered file went away


def _parents(top: str, path: str) -> list[str]:
    """--dir for each folder between `top` and `path`, searchable by all: bwrap makes missing
    ones 0700, which a snippet that runs as nobody could not pass through (an interpreter
    bound back under /root)."""
    parts = os.path.relpath(path, top).split(os.sep)[:-1]
    dirs = [os.path.join(top, *parts[: i + 1]) for i in range(len(parts))]
    return [arg for d in dirs for arg in ("--perms", "0755", "--dir", d)]


def pipe_holding(data: bytes) -> int:
    """The read end of a pipe that holds `data` (a few hundred bytes at most: the pipe keeps them
    until the child reads) and has no writer left."""
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    return r


def secret_paths() -> list[str]:
    """Files the snippet must never read even where the host is visible: the signing key."""
    key = os.environ.get("KBASE_SIGNING_KEY")
    if not key:
        return []
    # the sandbox hides the key by its path; another name of the same file would show it
    # to a snippet that runs as the key's owner (any host where kbase is not root)
    links = os.stat(key).st_nlink if os.path.exists(key) else 1
    if links > 1:
        raise OSError(
            f"KBASE_SIGNING_KEY {key} has {links} names (hard links); the sandbox hides one "
            "path only: remove the other links before running snippets"
        )
    return [os.path.realpath(key)]


def _masks(paths: list[str], secrets: list[str], small: str) -> tuple[list[str], list[str]]:
    """(the mounts that hide home folders and secrets, the masked folders)."""
    cmd: list[str] = []
    home = os.path.expanduser("~")
    masked = [d for d in dict.fromkeys([*MASKED_DIRS, home]) if os.path.isdir(d) and d != "/"]
    # a home folder inside another masked one is hidden already
    masked = [d for d in masked if not any(d != o and _under(d, o) for o in masked)]
    for d in masked:
        cmd += ["--size", small, "--tmpfs", d]
        for keep in _keep_under(d, paths, secrets):
            cmd += [*_parents(d, keep), "--ro-bind", keep, keep]
    for s in secrets:  # e.g. the signing key, wherever it lives
        if os.path.exists(s) and not any(_under(s, d) for d in masked):
            cover = (
                ["--ro-bind", "/dev/null"] if os.path.isfile(s) else ["--size", small, "--tmpfs"]
            )
            cmd += [*cover, s]
    return cmd, masked


def command(
    argv: list[str],
    host_dir: Path,
    names: Iterable[str],
    disk_mb: int,
    gpu: bool,
    userns: bool | None,
    hardening: tuple[bool, bool],
    status_fd: int,
    fds: list[int],
) -> tuple[list[str], bool, dict[str, Any]]:
    """(the bwrap argv, in a user namespace, what the ledger row's limits add: the snippet's host
    uid, whether unix sockets are refused). Each of `names` in host_dir reaches the workdir through
    an open fd; the fds the child inherits go into `fds`.

    `hardening`: (run as nobody when root, refuse unix sockets). Both stay on except where the GPU
    tier's preflight found that this machine's CUDA driver cannot start with one of them
    (fingerprint.cuda_preflight); the row's limits say which were in force."""
    as_nobody, socket_filter = hardening
    s = support()
    drop = drop_root() if as_nobody else []
    use_userns = (s.userns if userns is None else userns and s.userns) and not drop
    prog = unix_socket_filter() if socket_filter else None
    secrets = secret_paths()
    size, small = str(disk_mb * 1024 * 1024), str(MASK_MB * 1024 * 1024)
    cmd = [s.exe or "bwrap", *_ns_flags(use_userns)]
    if drop:  # setpriv needs these two to become RUN_AS; it keeps none of them
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    cmd += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    cmd += ["--perms", "1777", "--size", size, "--tmpfs", "/dev/shm"]
    cmd += ["--perms", "1777", "--size", size, "--tmpfs", "/var/tmp"]
    cmd += ["--size", small, "--tmpfs", "/run"]
    paths = needed_paths()
    masks, masked = _masks(paths, secrets, small)
    cmd += [*masks, "--perms", "1777", "--size", size, "--tmpfs", "/tmp"]
    cmd += ["--perms", "1777", "--dir", WORKDIR]
    # an interpreter or virtual environment that lives under /tmp (CI checkouts often do) comes
    # back read-only; nothing else of the host's /tmp does
    for keep in _keep_under("/tmp", paths, secrets):
        if not _under(WORKDIR, keep) and not _under(keep, WORKDIR):
            cmd += [*_parents("/tmp", keep), "--ro-bind", keep, keep]
    for name in names:
        fds.append(os.open(host_dir / name, os.O_RDONLY))
        cmd += ["--file", str(fds[-1]), f"{WORKDIR}/{name}"]
    # device nodes need read-write opens for CUDA's ioctls; a read-only mount does not restrict
    # device I/O anyway. Driver libraries come from the read-only root.
    for node in sorted(glob.glob("/dev/nvidia*")) if gpu else []:
        if os.path.exists(node):
            cmd += ["--dev-bind", node, node]
    if prog is not None:
        fds.append(pipe_holding(prog))
        cmd += ["--seccomp", str(fds[-1])]
    else:
        hidden = (*masked, "/run", "/tmp", "/var/tmp", *secrets)
        for sock in live_sockets(host_socket_files(tuple(hidden), tuple(paths))):
            cmd += ["--ro-bind", "/dev/null", sock]
    cmd += ["--chdir", WORKDIR, "--json-status-fd", str(status_fd), "--", *drop, *argv]
    # the snippet's host uid: RUN_AS when root could drop to it; unix sockets allowed only where
    # CUDA needs it, and then no host socket file is visible
    unix = "refused" if prog is not None else "host files covered"
    return cmd, use_userns, {"run_as": RUN_AS if drop else os.geteuid(), "unix_sockets": unix}
