"""Which verification tiers this machine can run, and which a given skill should run here."""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable
from itertools import product

from kbase.validators.fingerprint import GPU, find_spec, gpus

from kbase.closed_sets import TIER_SPECS


def _need_gpu() -> str | None:
    if os.environ.get("KBASE_NO_GPU"):
        return "GPU tier disabled by KBASE_NO_GPU"
    return None if gpus() else "no NVIDIA GPU found (nvidia-smi/NVML)"


# What a TierSpec may need (closed_sets.TierSpec.needs_any): requirement -> None when this
# machine has it, else why not.
REQUIREMENTS: dict[str, Callable[[], str | None]] = {
    "triton": lambda: None if find_spec("triton") else "triton is not installed",
    "nvcc": lambda: None if shutil.which("nvcc") else "nvcc is not on PATH",
    "gpu": _need_gpu,
}


def machine_tiers() -> dict[str, str | None]:
    """tier -> None when this machine can run it, else the reason it cannot."""
    out: dict[str, str | None] = {}
    for name, spec in TIER_SPECS.items():
        reasons = [REQUIREMENTS[r]() for r in spec.needs_any]
        out[name] = None if any(r is None for r in reasons) else "; ".join(r for r in reasons if r)
    return out


def gpu_for(min_cc: float | None) -> tuple[GPU | None, str]:
    """The first GPU that meets min_cc, or (None, why)."""
    found = gpus()
    if not found:
        return None, "no NVIDIA GPU found (nvidia-smi/NVML)"
    for g in found:
        if min_cc is None or float(g.compute_capability) + 1e-9 >= min_cc:
            return g, ""
    have = ", ".join(f"{g.name} ({g.compute_capability})" for g in found)
    return None, f"needs compute capability >= {min_cc}, this machine has {have}"


def plan_tiers(
    declared: list[str], asked: str, has_python: bool, has_cuda: bool, min_cc: float | None
) -> list[tuple[str, str | None]]:
    """(tier, skip reason or None to run) for one skill. `auto` considers every tier the skill
    declares; an explicit tier is run only if declared, since a snippet written for the
    interpreter may do things a compile-only run cannot."""
    available = machine_tiers()
    plan: list[tuple[str, str | None]] = []
    for tier in declared if asked == "auto" else [asked]:
        if tier not in declared:
            plan.append((tier, f"the skill does not declare the {tier} tier"))
            continue
        reason = available.get(tier)
        spec = TIER_SPECS[tier]
        if reason is None and not spec.python_only and not has_python and has_cuda:
            reason = REQUIREMENTS["nvcc"]()  # a CUDA-only snippet: the runner calls nvcc itself
        if reason is None and spec.python_only and not has_python:
            reason = f"{tier} runs Python snippets; this snippet has none"
        if reason is None and spec.sees_gpu:
            reason = gpu_for(min_cc)[1] or None
        plan.append((tier, reason))
    return plan


# Creates a primary context through the driver API, in a child: the parent must never touch CUDA.
_CUDA_PROBE = """\
import ctypes, sys
try:
    cu = ctypes.CDLL('libcuda.so.1')
except OSError as exc:
    sys.exit(f'cannot load libcuda.so.1: {exc}')
rc = cu.cuInit(0)
if rc: sys.exit(f'cuInit returned {rc}')
n = ctypes.c_int()
rc = cu.cuDeviceGetCount(ctypes.byref(n))
if rc or n.value < 1: sys.exit(f'cuDeviceGetCount returned {rc}, {n.value} device(s)')
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
rc = cu.cuDeviceGet(ctypes.byref(dev), 0) or cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
if rc: sys.exit(f'creating a context returned {rc}')
print('cuda ok')
"""


@functools.cache
def cuda_preflight(
    sandboxed: bool, memory_mb: int | None, visible: str = ""
) -> tuple[str | None, bool | None, tuple[bool, bool]]:
    """(why the gpu tier cannot run here, or None; whether to use a user namespace; the sandbox
    hardening CUDA starts under: (as nobody, unix sockets refused)). A sandbox that breaks CUDA
    would otherwise record every GPU skill as failing, so before the first GPU run we create a
    context the way snippets will, in the sandbox with the GPU device nodes; if that fails with a
    user namespace we try without one (possible as root: the other namespaces, the read-only root
    and the private directories stay), then without the memory limit, to tell the sandbox's fault
    from the machine's."""
    import sys

    from kbase.validators.sandbox import Limits, SandboxUnavailable, run_sandboxed

    extra = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": visible} if visible else {}
    # strongest first: as nobody with unix sockets refused; then each relaxed, then both
    attempts: list[tuple[bool | None, int | None, tuple[bool, bool]]] = [
        (u, memory_mb, h) for h in product((True, False), (True, False)) for u in (True, False)
    ]
    if not sandboxed:
        attempts = [(None, memory_mb, (True, True))]
    if memory_mb:
        attempts.append((attempts[-1][0], None, attempts[-1][2]))
    last = ""
    for userns, mem, hardening in attempts:
        try:
            res = run_sandboxed(
                [sys.executable, "-c", _CUDA_PROBE],
                {},
                Limits(60, mem, "data"),
                lambda w: {**extra, "HOME": w},
                sandboxed=sandboxed,
                gpu=True,
                userns=userns,
                hardening=hardening,
            )
        except SandboxUnavailable as exc:
            return f"no sandbox for the gpu tier: {exc}", None, (True, True)
        if res.returncode == 0:
            if mem != memory_mb:
                why = f"CUDA does not initialise under the {memory_mb} MiB memory limit; "
                return why + "raise it with --memory-mb (0 removes it)", None, hardening
            return None, userns, hardening
        last = (res.stderr.strip().splitlines() or [res.error or f"exit {res.returncode}"])[-1]
    where = "in the sandbox" if sandboxed else "in a child process"
    return f"the CUDA driver does not initialise {where}: {last}", None, (True, True)
