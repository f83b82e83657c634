"""What one snippet run executes, per tier: the command line (the Python bootstrap, or nvcc and
the binary for CUDA), the target architecture and the environment (validators/runner.py runs it).

The runner's read-only bytecode cache: where the installed packages have no `__pycache__` and
bytecode writing is off (the H200 machine: torch in a venv without bytecode,
`PYTHONDONTWRITEBYTECODE=1`), every snippet compiles torch from source on import: about 3 s of
each GPU run. So the runner imports the usual modules once, itself, outside the sandbox, with
`PYTHONPYCACHEPREFIX` at a cache folder it owns; snippets get that folder read-only through the
same variable. A snippet cannot write the cache (read-only bind, and the folder lives under the
runner's masked home), so it cannot plant bytecode for a later run; Python checks each cached file
against its source's mtime and size, so an upgraded package is compiled afresh, in memory. Where
packages do have their `__pycache__`, nothing changes: pointing Python at a prefix would make it
ignore those, which costs more than it saves."""

from __future__ import annotations

import functools
import importlib.util
import os
import shlex
import subprocess
import sys
import threading
from pathlib import Path

from kbase.validators.fingerprint import find_spec, gpu_for
from kbase.validators.snippets import SnippetLayout

from kbase.closed_sets import TIER_SPECS

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


def pycache_prefix() -> str | None:
    """The bytecode prefix for snippet runs (warmed once per process), or None when not needed."""
    with _lock:  # parallel runs start together: one warms, the others wait for it
        return _pycache_prefix()


@functools.cache
def _pycache_prefix() -> str | None:
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


CPU_COMPILE_ARCH = "sm_90a"

# The snippet runs under runpy so that a watchdog can print where it is stuck just before the
# deadline; -X faulthandler does the same for crashes. Both feed the line mapping.
# With a turn to wait for (the GPU's device gate), it first imports what the snippet will (while
# another run holds the GPU), then waits for one byte on stdin.
# The verdict does not trust the exit status alone (os._exit(0) from an atexit or except hook,
# a forged bwrap status): a pass needs the completion record, this run's nonce written to the
# record pipe only after the snippet's main returned, every non-daemon thread ended and no
# thread raised, in the process that started it (a forked child that returns from the snippet
# holds the same fd and nonce, and would complete a run its parent then fails with os._exit(0)).
# The nonce comes through a pipe read and closed before the snippet runs, and is held only in
# this function's frame; the record fd is closed on exec, so a re-executed interpreter
# (`python -O`) cannot write it. Asserts stay on: -O and PYTHONOPTIMIZE are refused. A snippet
# written to reach into this bootstrap's own objects (its frames, the hook's closure) can still
# forge a pass: docs/skill-format.md says so, and review is what catches such code.
_BOOTSTRAP = (
    "import faulthandler, os, runpy, sys, threading\n"
    # what the end of a run calls is bound here, before the snippet can replace a module's
    # attribute (threading._shutdown, os.write, os.getpid, sys.exit, SystemExit)
    "def _kbase_run(record, nonce_fd, getpid=os.getpid, write=os.write, close=os.close,\n"
    "               shutdown=threading._shutdown, done=SystemExit):\n"
    "    me = getpid()\n"
    "    nonce = os.read(nonce_fd, 64)\n"
    "    os.close(nonce_fd)\n"
    "    os.set_inheritable(record, False)\n"
    "    if sys.flags.optimize:\n"
    "        sys.exit('kbase: snippets run with asserts on (no -O, no PYTHONOPTIMIZE)')\n"
    "    os.makedirs(os.environ.get('TMPDIR') or 'tmp', exist_ok=True)\n"
    "    for m in os.environ.pop('KBASE_PRELOAD', '').split():\n"
    "        try:\n"
    "            __import__(m)\n"
    "        except Exception:\n"
    "            pass\n"
    "    if os.environ.pop('KBASE_WAIT_TURN', ''):\n"
    "        sys.stdin.buffer.read(1)\n"
    "    faulthandler.dump_traceback_later(float(sys.argv.pop(1)), exit=False)\n"
    "    raised = []\n"
    "    def hook(args, _default=threading.excepthook):\n"
    "        raised.append(getattr(args.thread, 'name', '?'))\n"
    "        _default(args)\n"
    "    threading.excepthook = hook\n"
    "    path = os.path.abspath('snippet.py')\n"
    "    sys.argv[0] = path\n"
    "    try:\n"
    "        runpy.run_path(path, run_name='__main__')\n"
    "    except done as exc:\n"
    "        if exc.code not in (None, 0):\n"
    "            raise\n"
    # what the interpreter does at exit: the threading atexit hooks first (they let a
    # ThreadPoolExecutor's idle workers end), then a join of every non-daemon thread
    "    shutdown()\n"
    "    if threading.excepthook is not hook:\n"
    "        raise done('kbase: the snippet replaced threading.excepthook')\n"
    "    if raised:\n"
    "        raise done('kbase: uncaught exception in thread(s) ' + ', '.join(raised))\n"
    "    if getpid() != me:\n"
    "        raise done('kbase: a forked child returned from the snippet: it completes nothing')\n"
    "    write(record, nonce)\n"
    "    close(record)\n"
    "_kbase_run(int(os.environ.pop('KBASE_RECORD_FD')), int(os.environ.pop('KBASE_NONCE_FD')))\n"
)


# A compiled run (nvcc, then the CUDA program) reports its exit status through this wrapper's
# completion record, `<status> <nonce>`, not through bwrap's: the program shares the sandbox's
# uid and could forge bwrap's pid-1 status. The wrapper holds the nonce and the record fd where
# the program cannot reach them: read and closed, not inherited, and the wrapper made
# non-dumpable (no ptrace, /proc/<pid>/mem or pidfd_getfd by a process without capabilities).
_SHELL_WRAPPER = (
    "import ctypes, os, subprocess, sys\n"
    "record = int(os.environ.pop('KBASE_RECORD_FD'))\n"
    "nonce_fd = int(os.environ.pop('KBASE_NONCE_FD'))\n"
    "nonce = os.read(nonce_fd, 64)\n"
    "os.close(nonce_fd)\n"
    "os.set_inheritable(record, False)\n"
    "ctypes.CDLL(None).prctl(4, 0)  # PR_SET_DUMPABLE\n"
    "rc = subprocess.call(['/bin/sh', '-c', sys.argv[1]])\n"
    "os.write(record, str(rc).encode() + b' ' + nonce)\n"
    "sys.exit(rc if 0 <= rc < 256 else 128 - rc)\n"
)


def nvcc_arch_for(tier: str, min_cc: float | None) -> str:
    if not TIER_SPECS[tier].sees_gpu:
        return os.environ.get("KBASE_NVCC_ARCH", CPU_COMPILE_ARCH)
    gpu, _ = gpu_for(min_cc)
    if gpu is None:
        return CPU_COMPILE_ARCH
    major, minor = gpu.compute_capability.split(".")
    # the arch-specific "a" targets (wgmma, tcgen05) exist from Hopper on
    return f"sm_{major}{minor}{'a' if int(major) >= 9 else ''}"


def _tier_env(
    tier: str, workdir: str, arch: str, min_cc: float | None, workers: int
) -> dict[str, str]:
    env = {
        "KBASE_TIER": tier,
        "KBASE_NVCC_ARCH": arch,
        "HOME": workdir,
        "TMPDIR": f"{workdir}/tmp",
        "TRITON_CACHE_DIR": f"{workdir}/.triton-cache",
        "TRITON_HOME": workdir,
        "XDG_CACHE_HOME": f"{workdir}/.cache",
        "TORCHINDUCTOR_CACHE_DIR": f"{workdir}/.inductor-cache",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    if cached := pycache_prefix():
        env["PYTHONPYCACHEPREFIX"] = cached
    if "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // max(1, workers)))
    spec = TIER_SPECS[tier]
    env.update(spec.env)
    if not spec.sees_gpu:  # CPU tiers must give the same verdict with or without a GPU
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        gpu, _ = gpu_for(min_cc)
        if gpu is not None:
            env["KBASE_COMPUTE_CAPABILITY"] = gpu.compute_capability
            if "CUDA_VISIBLE_DEVICES" not in os.environ:
                # nvidia-smi numbers devices in PCI order; CUDA's default order may differ
                env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
                env["CUDA_VISIBLE_DEVICES"] = str(gpu.index)
    return env


def _command(layout: SnippetLayout, tier: str, arch: str, timeout: float) -> list[str]:
    """One command per run: the sandbox holds one working directory for the whole run."""
    if layout.python is not None:
        watchdog = str(max(0.5, timeout - 0.3))
        return [sys.executable, "-u", "-X", "faulthandler", "-c", _BOOTSTRAP, watchdog]
    cu = [f.name for f in layout.cuda_files]
    nvcc = ["nvcc", f"-arch={arch}", "-Xptxas", "-v"]
    if TIER_SPECS[tier].cuda_runs_binary:
        host = [f.name for f in layout.files if f.lang in ("cpp", "c++", "c")]
        build = shlex.join([*nvcc, "-o", "snippet_bin", *cu, *host])
        script = f"mkdir -p tmp && {build} && exec ./snippet_bin"
    else:
        compiles = [shlex.join([*nvcc, "-c", n, "-o", n + ".o"]) for n in cu]
        script = " && ".join(["mkdir -p tmp", *compiles])
    return [sys.executable, "-c", _SHELL_WRAPPER, script]
