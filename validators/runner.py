"""Verify skills: lay out each snippet in a fresh directory, run it per tier in the sandbox, judge it."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from kbase.validators.fingerprint import fingerprint
from kbase.validators.sandbox import (
    Limits,
    SandboxResult,
    kill_all_live,
    network_isolation,
    run_sandboxed,
    tail,
)
from kbase.validators.snippets import SnippetError, SnippetLayout, layout_blocks, locate_failure
from kbase.validators.tiers import cuda_preflight, gpu_for, plan_tiers

from kbase.closed_sets import TIER_SPECS

SKIP_EXIT = 77  # the automake convention: "this test cannot run here"
CPU_COMPILE_ARCH = "sm_90a"

# The snippet runs under runpy so that a watchdog can print where it is stuck just before the
# deadline; -X faulthandler does the same for crashes. Both feed the line mapping.
_BOOTSTRAP = (
    "import faulthandler, os, runpy, sys\n"
    "faulthandler.dump_traceback_later(float(sys.argv.pop(1)), exit=False)\n"
    "path = os.path.abspath('snippet.py')\n"
    "sys.argv[0] = path\n"
    "runpy.run_path(path, run_name='__main__')\n"
)
# host-side allocation failures only: "CUDA out of memory" is the device, not our limit
_MEMORY_SIGNS = ("MemoryError", "can't allocate memory", "std::bad_alloc", "Cannot allocate memory")


@dataclass
class RunOutcome:
    skill: str
    tier: str
    verdict: str
    duration_s: float
    line: int | None = None
    message: str = ""
    snippet_sha256: str = ""
    output_tail: str = ""
    fingerprint: dict = field(default_factory=dict)
    isolated: bool = False
    executed: bool = False  # False for skips decided before running anything
    at: str = ""

    def result_dict(self) -> dict:
        """The public `--json` row: shaped (and checked) by kbase.schema.RunResult."""
        from kbase.schema import RunResult

        return RunResult(
            skill=self.skill,
            tier=self.tier,
            verdict=self.verdict,
            duration_s=round(self.duration_s, 3),
            line=self.line,
            message=self.message,
        ).model_dump(mode="json")


@dataclass
class RunSettings:
    tier: str = "auto"
    workers: int = 1
    memory_mb: int | None = None  # None: the per-tier default
    timeout_s: float | None = None  # None: the skill's verification.timeout_s
    isolate: bool = True
    root: Path | None = None


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
    tier: str, workdir: Path, arch: str, min_cc: float | None, workers: int
) -> dict[str, str]:
    env = {
        "KBASE_TIER": tier,
        "KBASE_NVCC_ARCH": arch,
        "HOME": str(workdir),
        "TMPDIR": str(workdir / "tmp"),
        "TRITON_CACHE_DIR": str(workdir / ".triton-cache"),
        "TRITON_HOME": str(workdir),
        "XDG_CACHE_HOME": str(workdir / ".cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(workdir / ".inductor-cache"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    if "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // max(1, workers)))
    spec = TIER_SPECS[tier]
    env.update(spec.env)
    if not spec.sees_gpu:
        env["CUDA_VISIBLE_DEVICES"] = (
            ""  # CPU tiers must give the same verdict with or without a GPU
        )
    else:
        gpu, _ = gpu_for(min_cc)
        if gpu is not None:
            env["KBASE_COMPUTE_CAPABILITY"] = gpu.compute_capability
            if "CUDA_VISIBLE_DEVICES" not in os.environ:
                # nvidia-smi numbers devices in PCI order; CUDA's default order may differ
                env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
                env["CUDA_VISIBLE_DEVICES"] = str(gpu.index)
    return env


def _steps(layout: SnippetLayout, tier: str, arch: str, timeout: float) -> list[list[str]]:
    if layout.python is not None:
        return [
            [
                sys.executable,
                "-u",
                "-X",
                "faulthandler",
                "-c",
                _BOOTSTRAP,
                str(max(0.5, timeout - 0.3)),
            ]
        ]
    cu = [f.name for f in layout.cuda_files]
    if TIER_SPECS[tier].cuda_runs_binary:
        host = [f.name for f in layout.files if f.lang in ("cpp", "c++", "c")]
        return [
            ["nvcc", f"-arch={arch}", "-Xptxas", "-v", "-o", "snippet_bin", *cu, *host],
            ["./snippet_bin"],
        ]
    return [
        ["nvcc", f"-arch={arch}", "-Xptxas", "-v", "-c", name, "-o", name + ".o"] for name in cu
    ]


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _judge(
    res: SandboxResult, layout: SnippetLayout, limits: Limits, timeout: float
) -> tuple[str, int | None, str]:
    output = res.stderr + "\n" + res.stdout
    if res.error:
        return "error", None, res.error
    if res.timed_out:
        return "timeout", locate_failure(layout, output), f"ran past the {timeout:g} s timeout"
    rc = res.returncode
    if rc == 0:
        return "pass", None, _last_line(res.stdout)
    if rc == SKIP_EXIT:
        return (
            "skip",
            None,
            _last_line(res.stdout + "\n" + res.stderr) or "the snippet skipped itself (exit 77)",
        )
    line = locate_failure(layout, output)
    if rc is not None and rc < 0:
        if -rc == signal.SIGXCPU:
            return "killed", line, f"CPU-time limit exceeded ({res.signal_name})"
        why = f"killed by {res.signal_name}"
        if -rc == signal.SIGKILL:
            why += " (out of memory, or killed from outside)"
        return "killed", line, why
    last = _last_line(res.stderr) or _last_line(res.stdout) or f"exit status {rc}"
    if any(sign in output for sign in _MEMORY_SIGNS) and limits.memory_mb:
        last = f"memory limit ({limits.memory_mb} MiB) hit: {last}"
    return "fail", line, last


def _rmtree(path: Path) -> None:
    def unlock(func, p, _exc):  # a snippet may have chmod'ed its own files read-only
        try:
            os.chmod(p, stat.S_IRWXU)
            func(p)
        except OSError:
            pass

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=unlock)
    else:
        shutil.rmtree(path, onerror=unlock)


_GPU_LOCK = threading.Lock()


def run_tier(skill, tier: str, settings: RunSettings) -> RunOutcome:
    """Run one skill's snippet on one tier; every failure mode becomes a verdict.

    GPU runs take turns even with -j N: timings and memory checks mean nothing on a shared device.
    """
    if TIER_SPECS[tier].exclusive:
        with _GPU_LOCK:
            return _run_tier(skill, tier, settings)
    return _run_tier(skill, tier, settings)


def _run_tier(skill, tier: str, settings: RunSettings) -> RunOutcome:
    v = skill.meta.verification
    timeout = float(settings.timeout_s or v.timeout_s)
    spec = TIER_SPECS[tier]
    memory = (
        settings.memory_mb
        if settings.memory_mb is not None
        else os.environ.get("KBASE_SANDBOX_MEMORY_MB")
    )
    memory = int(memory) if memory not in (None, "") else spec.default_memory_mb
    limits = Limits(timeout_s=timeout, memory_mb=memory or None, memory_kind=spec.memory_kind)
    base = RunOutcome(
        skill=skill.name,
        tier=tier,
        verdict="error",
        duration_s=0.0,
        snippet_sha256=skill.snippet_sha256(),
        fingerprint=fingerprint(tier, settings.root),
        at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        executed=True,
    )
    try:
        layout = layout_blocks(skill.snippet_blocks())
    except SnippetError as exc:
        base.line, base.message = exc.line, str(exc)
        return base
    isolate = settings.isolate
    if spec.sees_gpu:
        device, _ = gpu_for(v.min_compute_capability)
        visible = (
            str(device.index)
            if device is not None and "CUDA_VISIBLE_DEVICES" not in os.environ
            else ""
        )
        why, isolate = cuda_preflight(settings.isolate, limits.memory_mb, visible)
        if why:  # the machine's or the sandbox's fault, not the snippet's: not a verdict to record
            base.verdict, base.message, base.executed = "skip", why, False
            return base
    arch = nvcc_arch_for(tier, v.min_compute_capability)
    workdir = Path(tempfile.mkdtemp(prefix=f"kbase-verify-{skill.name[:40]}-"))
    try:
        (workdir / "tmp").mkdir()
        layout.write(workdir)
        env = _tier_env(tier, workdir, arch, v.min_compute_capability, settings.workers)
        spent = 0.0
        outputs: list[str] = []
        res: SandboxResult | None = None
        for argv in _steps(layout, tier, arch, timeout):
            left = timeout - spent
            res = run_sandboxed(
                argv,
                workdir,
                Limits(left, limits.memory_mb, limits.memory_kind, limits.cpu_s),
                env,
                isolate=isolate,
                on_timeout_grace_s=1.0 if argv[0] == sys.executable else 0.0,
            )
            spent += res.duration_s
            outputs.append(res.stderr + res.stdout)
            if res.returncode != 0 or res.timed_out or res.error:
                break
        assert res is not None
        base.verdict, base.line, base.message = _judge(res, layout, limits, timeout)
        base.duration_s = spent
        base.isolated = res.isolated
        base.output_tail = tail("\n".join(outputs))
        if base.verdict == "pass" and res.orphans_killed:
            base.message = (
                base.message + f" ({res.orphans_killed} leftover process(es) killed)"
            ).strip()
    except OSError as exc:
        base.message = f"could not prepare the run: {exc}"
    finally:
        _rmtree(workdir)
    return base


def plan_skill(skill, asked: str) -> list[tuple[str, str | None]]:
    v = skill.meta.verification
    try:
        layout = layout_blocks(skill.snippet_blocks())
        has_py, has_cu = layout.python is not None, bool(layout.cuda_files)
    except SnippetError:
        has_py, has_cu = True, False  # run_tier reports the layout error with its line
    return plan_tiers(list(v.tiers), asked, has_py, has_cu, v.min_compute_capability)


def verify_skills(
    skills: list, settings: RunSettings, on_done: Callable[[RunOutcome], None] | None = None
) -> list[RunOutcome]:
    """Every (skill, tier) of the plan, in parallel over `workers`; results in skill, tier order."""
    jobs: list[tuple[int, object, str]] = []
    outcomes: dict[int, RunOutcome] = {}
    order = 0
    for skill in skills:
        for tier, reason in plan_skill(skill, settings.tier):
            if reason is None:
                jobs.append((order, skill, tier))
            else:
                outcomes[order] = RunOutcome(
                    skill=skill.name,
                    tier=tier,
                    verdict="skip",
                    duration_s=0.0,
                    message=reason,
                    snippet_sha256=skill.snippet_sha256(),
                )
                if on_done:
                    on_done(outcomes[order])
            order += 1
    pool = ThreadPoolExecutor(max_workers=max(1, settings.workers))
    restore = _terminate_as_interrupt()
    try:
        futures = {pool.submit(run_tier, skill, tier, settings): idx for idx, skill, tier in jobs}
        for fut in as_completed(futures):
            outcome = fut.result()
            outcomes[futures[fut]] = outcome
            if on_done:
                on_done(outcome)
    except BaseException:
        # Ctrl-C or SIGTERM: stop queued runs and kill the running ones instead of waiting them out
        pool.shutdown(wait=False, cancel_futures=True)
        kill_all_live()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        restore()
    return [outcomes[i] for i in sorted(outcomes)]


def _terminate_as_interrupt() -> Callable[[], None]:
    """Make SIGTERM (what CI sends on cancel) unwind like Ctrl-C; returns the undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def raise_interrupt(_sig, _frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    return lambda: signal.signal(signal.SIGTERM, previous)


def isolation_note(settings: RunSettings, outcomes: list[RunOutcome] | None = None) -> str | None:
    """None when snippets ran without network, else why (some of) them could not be cut off."""
    if not settings.isolate:
        return "network isolation turned off (--no-isolate)"
    ok, why = network_isolation()
    if not ok:
        return f"snippets ran WITH network access: {why}"
    open_runs = [o for o in outcomes or [] if o.executed and not o.isolated]
    if open_runs:
        return (
            f"{len(open_runs)} run(s) had network access: CUDA does not initialise inside a user "
            "namespace on this machine, so the gpu tier runs without one"
        )
    return None
