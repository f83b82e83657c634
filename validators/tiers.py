"""Which verification tiers this machine can run, and which a given skill should run here."""
from __future__ import annotations

import importlib.util
import os
import shutil
from typing import Optional

from kbase.validators.fingerprint import GPU, gpus

TIERS = ("cpu-interpret", "cpu-compile", "gpu")
TIER_CHOICES = ("auto",) + TIERS


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def machine_tiers() -> dict[str, Optional[str]]:
    """tier -> None when this machine can run it, else the reason it cannot."""
    triton = _has_module("triton")
    nvcc = shutil.which("nvcc") is not None
    out: dict[str, Optional[str]] = {}
    out["cpu-interpret"] = None if triton else "triton is not installed"
    out["cpu-compile"] = None if (triton or nvcc) else "neither triton nor nvcc is available"
    if os.environ.get("KBASE_NO_GPU"):
        out["gpu"] = "GPU tier disabled by KBASE_NO_GPU"
    else:
        out["gpu"] = None if gpus() else "no NVIDIA GPU found (nvidia-smi/NVML)"
    return out


def gpu_for(min_cc: Optional[float]) -> tuple[Optional[GPU], str]:
    """The first GPU that meets min_cc, or (None, why)."""
    found = gpus()
    if not found:
        return None, "no NVIDIA GPU found (nvidia-smi/NVML)"
    if min_cc is None:
        return found[0], ""
    for g in found:
        if float(g.compute_capability) + 1e-9 >= min_cc:
            return g, ""
    have = ", ".join(f"{g.name} ({g.compute_capability})" for g in found)
    return None, f"needs compute capability >= {min_cc}, this machine has {have}"


def plan_tiers(declared: list[str], asked: str, has_python: bool, has_cuda: bool,
               min_cc: Optional[float]) -> list[tuple[str, Optional[str]]]:
    """(tier, skip reason or None to run) for one skill.

    `auto` considers every tier the skill declares; an explicit tier is run only if declared,
    since a snippet written for the interpreter may do things a compile-only run cannot.
    """
    available = machine_tiers()
    candidates = list(declared) if asked == "auto" else [asked]
    plan: list[tuple[str, Optional[str]]] = []
    for tier in candidates:
        if tier not in declared:
            plan.append((tier, f"the skill does not declare the {tier} tier"))
            continue
        reason = available.get(tier)
        if reason is None and tier != "cpu-interpret" and not has_python and has_cuda and shutil.which("nvcc") is None:
            reason = "nvcc is not on PATH"
        if reason is None and tier == "cpu-interpret" and not has_python:
            reason = "cpu-interpret runs Python snippets; this snippet has none"
        if reason is None and tier == "gpu":
            _gpu, reason = gpu_for(min_cc)
            reason = reason or None
        plan.append((tier, reason))
    return plan
