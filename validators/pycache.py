"""A read-only bytecode cache for snippets, filled by the runner, never by a snippet.

Where the installed packages have no `__pycache__` and bytecode writing is off (the H200 machine:
torch in a venv without bytecode, `PYTHONDONTWRITEBYTECODE=1`), every snippet compiles torch from
source on import: about 3 s of each GPU run. So the runner imports the usual modules once, itself,
outside the sandbox, with `PYTHONPYCACHEPREFIX` at a cache folder it owns; snippets get that folder
read-only through the same variable. A snippet cannot write the cache (read-only bind, and the
folder lives under the runner's masked home), so it cannot plant bytecode for a later run; Python
checks each cached file against its source's mtime and size, so an upgraded package is compiled
afresh, in memory. Where packages do have their `__pycache__`, nothing changes: pointing Python at
a prefix would make it ignore those, which costs more than it saves."""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
import threading
from pathlib import Path

from kbase.validators.fingerprint import find_spec

# What snippets import; a module missing here is simply not warmed.
WARM_MODULES = tuple(
    "numpy torch torch.testing torch.nn.functional triton triton.language triton.testing "
    "triton.compiler".split()
)
PROBE_MODULE = "torch"  # the big one: if it has bytecode next to its source, all is well


def cache_dir() -> Path:
    if env := os.environ.get("KBASE_PYCACHE_DIR"):
        return Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "kbase" / "pycache"


def _needed() -> bool:
    if os.environ.get("KBASE_PYCACHE_DIR", "") in ("0", "off"):
        return False
    spec = find_spec(PROBE_MODULE)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return False
    return not Path(importlib.util.cache_from_source(spec.origin)).exists()


_lock = threading.Lock()


def prefix() -> str | None:
    """The bytecode prefix for snippet runs (warmed once per process), or None when not needed."""
    with _lock:  # parallel runs start together: one warms, the others wait for it
        return _prefix()


@functools.cache
def _prefix() -> str | None:
    if not _needed():
        return None
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    warm = "\n".join(f"try:\n    import {m}\nexcept Exception:\n    pass" for m in WARM_MODULES)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(folder)
    env["CUDA_VISIBLE_DEVICES"] = ""  # importing needs no device; keep the GPU untouched
    try:
        subprocess.run(
            [sys.executable, "-c", warm], env=env, timeout=600, capture_output=True, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return str(folder)
