"""The per-run limits of a sandboxed run: what they are, how the child process sets them
between fork and exec, and the row that says which of them held (validators/sandbox.py).
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

from kbase.validators.cgroup import RunCgroup, join_in_child
from kbase.validators.hostproc import libc_prctl_deathsig


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


def _limits_row(
    limits: Limits, cg: RunCgroup | None, sandboxed: bool, userns: bool, nproc: int
) -> dict:
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
