"""What machine and software a verdict was reached on, found without importing torch or touching
CUDA: importing torch costs seconds and, on a CUDA build, initialising it in the parent would pin
a context in every later fork; so versions come from package metadata and files, and the GPU from
nvidia-smi (or NVML through ctypes when nvidia-smi is missing). And which verification tiers this
machine can run, and which a given skill should run here."""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import functools
import importlib.metadata as md
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from itertools import product
from pathlib import Path

from kbase.closed_sets import CPU_FLAGS, TIER_SPECS


@dataclass(frozen=True)
class GPU:
    index: int  # nvidia-smi / NVML order, which is PCI bus order
    name: str
    compute_capability: str  # "9.0"
    driver: str


def _run(argv: list[str], timeout: float = 10.0) -> str | None:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout if p.returncode == 0 else None


def _gpus_from_smi() -> list[GPU] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    out = _run([exe, "--query-gpu=index,name,compute_cap,driver_version", "--format=csv,noheader"])
    if out is None:
        return None
    rows = [[p.strip() for p in row.split(",")] for row in out.strip().splitlines()]
    # the query's order is GPU's
    return [GPU(int(p[0]), *p[1:]) for p in rows if len(p) == 4 and re.match(r"^\d+\.\d+$", p[2])]


def _gpus_from_nvml() -> list[GPU] | None:
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    try:
        count = ctypes.c_uint()
        if nvml.nvmlInit_v2() != 0 or nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        drv = ctypes.create_string_buffer(96)
        nvml.nvmlSystemGetDriverVersion(drv, 96)
        gpus = []
        for i in range(count.value):
            handle = ctypes.c_void_p()
            if nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) != 0:
                continue
            name = ctypes.create_string_buffer(96)
            nvml.nvmlDeviceGetName(handle, name, 96)
            cc = ctypes.c_int(), ctypes.c_int()
            nvml.nvmlDeviceGetCudaComputeCapability(handle, *map(ctypes.byref, cc))
            cap = f"{cc[0].value}.{cc[1].value}"
            gpus.append(GPU(i, name.value.decode(), cap, drv.value.decode()))
        return gpus
    except (AttributeError, OSError):
        return None
    finally:
        with contextlib.suppress(AttributeError, OSError):
            nvml.nvmlShutdown()


@functools.cache
def gpus() -> tuple[GPU, ...]:
    found = _gpus_from_smi()
    if not found:  # missing, failing, or too old to report compute_cap
        found = _gpus_from_nvml() or found
    return tuple(found or ())


def package_version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def find_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """Where module `name` is, without importing it; None when it is not installed."""
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def torch_cuda_version() -> str | None:
    """torch.version.cuda, read from torch/version.py instead of importing torch."""
    spec = find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    vfile = Path(list(spec.submodule_search_locations)[0]) / "version.py"
    try:
        text = vfile.read_text(encoding="utf-8")
    except OSError:
        return None
    m = re.search(r"^cuda\s*(?::\s*[^=]+)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return m.group(1) if m else None


@functools.cache
def nvcc_version() -> str | None:
    exe = shutil.which("nvcc")
    m = re.search(r"release (\d+\.\d+)", (exe and _run([exe, "--version"])) or "")
    return m.group(1) if m else None


def git_commit(root: Path) -> str | None:
    if not (root / ".git").exists() or shutil.which("git") is None:
        return None
    out = _run(["git", "-C", str(root), "rev-parse", "HEAD"], timeout=5)
    return out.strip() if out else None


@functools.cache
def cpu_host() -> tuple[str | None, list[str]]:
    """(CPU model name, the CPU_FLAGS this host has): torch's CPU kernels differ by them."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor() or None, []
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    flags = re.search(r"^flags\s*:\s*(.+)$", text, re.M)
    have = set(flags.group(1).split()) if flags else set()
    return (model.group(1).strip() if model else None), sorted(f for f in CPU_FLAGS if f in have)


@functools.cache
def _static(root: str | None) -> dict:
    gpu = gpus()[0] if gpus() else None
    return {
        "git_commit": git_commit(Path(root)) if root else None,
        "python": platform.python_version(),
        "torch": package_version("torch"),
        "torch_cuda": torch_cuda_version(),
        "triton": package_version("triton"),
        "numpy": package_version("numpy"),
        "nvcc": nvcc_version(),
        "driver": gpu.driver if gpu else None,
        "gpu_name": gpu.name if gpu else None,
        "compute_capability": gpu.compute_capability if gpu else None,
        "machine": platform.machine(),
        "cpu_model": cpu_host()[0],
        "cpu_flags": cpu_host()[1],
    }


def fingerprint(tier: str | None = None, root: Path | None = None) -> dict:
    """The environment of a run on `tier`, as a plain dict (a ledger row's `fingerprint`). CPU
    tiers do not see the GPU, so their fingerprint leaves the GPU out: a cpu-interpret pass says
    nothing about an architecture."""
    fp = dict(_static(str(root) if root else None))
    fp["date"] = dt.datetime.now(dt.UTC).date().isoformat()
    spec = TIER_SPECS.get(tier or "")
    fp["interpret"] = bool(spec and spec.env.get("TRITON_INTERPRET") == "1")
    if spec is not None and not spec.sees_gpu:
        fp.update(gpu_name=None, compute_capability=None)
    return fp


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
