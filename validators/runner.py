"""Verify skills: lay out each snippet, run it per tier in the sandbox (the command:
validators/run_command.py), judge it and its claims (_judge: a verdict, the line, a message)."""

from __future__ import annotations

import datetime as dt
import os
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbase.validators.capture import printable, tail
from kbase.validators.claims import judge_measures
from kbase.validators.device_gate import DeviceGate, device_use_of, preload_for
from kbase.validators.fingerprint import cuda_preflight, fingerprint, gpu_for, plan_tiers
from kbase.validators.run_command import _command, _tier_env, nvcc_arch_for
from kbase.validators.sandbox import Limits, SandboxUnavailable, run_sandboxed, sandbox_status
from kbase.validators.sandbox_supervise import SandboxResult, kill_all_live
from kbase.validators.snippets import SnippetError, SnippetLayout, layout_blocks, locate_failure

from kbase.closed_sets import TIER_SPECS


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
    claims: list[dict] = field(default_factory=list)  # {"id", "value", "expect", "holds"}
    literals_seen: list[str] = field(default_factory=list)
    limits: dict = field(default_factory=dict)

    def result_dict(self) -> dict:
        """The public `--json` row: shaped (and checked) by kbase.schema.RunResult."""
        from kbase.schema import RunResult

        row = {k: getattr(self, k) for k in RunResult.model_fields}
        row["duration_s"] = round(self.duration_s, 3)
        return RunResult.model_validate(row).model_dump(mode="json", exclude_none=False)


@dataclass
class RunSettings:
    tier: str = "auto"
    workers: int = 1
    memory_mb: int | None = None  # None: the per-tier default
    timeout_s: float | None = None  # None: the skill's verification.timeout_s
    unsafe_no_sandbox: bool = False  # run without bubblewrap: rows say isolated=false
    disk_mb: int | None = None  # size of the run's tmpfs (None: Limits' default)
    root: Path | None = None


_DEVICE_GATE = DeviceGate()


def run_tier(skill, tier: str, settings: RunSettings) -> RunOutcome:
    """Run one skill's snippet on one tier; every failure mode becomes a verdict. With -j N, GPU
    runs pass the device gate: a run that times, profiles or reads device-wide memory holds the
    GPU alone; correctness-only runs share it (validators/device_gate.py)."""
    if not TIER_SPECS[tier].device_gate:
        return _run_tier(skill, tier, settings)
    use = device_use_of(skill)
    out = _run_tier(skill, tier, settings, turn=lambda: _DEVICE_GATE.hold(use))
    if out.executed:
        out.limits = {**out.limits, "gpu_use": use}
    return out


def _memory_for(settings: RunSettings, tier: str) -> int:
    if settings.memory_mb is not None:
        return settings.memory_mb
    env = os.environ.get("KBASE_SANDBOX_MEMORY_MB")
    return int(env) if env else TIER_SPECS[tier].default_memory_mb


def _run_tier(skill, tier: str, settings: RunSettings, turn=None) -> RunOutcome:
    v = skill.meta.verification
    min_cc = v.min_compute_capability
    timeout = float(settings.timeout_s or v.timeout_s)
    spec = TIER_SPECS[tier]
    memory = _memory_for(settings, tier) or None
    limits = Limits(timeout, memory, spec.memory_kind, disk_mb=settings.disk_mb or Limits.disk_mb)
    fp, at = fingerprint(tier, settings.root), dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    base = RunOutcome(skill.name, tier, "error", 0.0, snippet_sha256=skill.snippet_sha256())
    base.fingerprint, base.at, base.executed = fp, at, True
    try:
        layout = layout_blocks(skill.snippet_blocks())
    except SnippetError as exc:
        base.line, base.message = exc.line, str(exc)
        return base
    sandboxed = not settings.unsafe_no_sandbox
    userns: bool | None = None
    hardening = (True, True)
    if spec.sees_gpu:
        device, _ = gpu_for(min_cc)
        visible = "" if not device or "CUDA_VISIBLE_DEVICES" in os.environ else str(device.index)
        why, userns, hardening = cuda_preflight(sandboxed, limits.memory_mb, visible)
        if why:  # the machine's or the sandbox's fault, not the snippet's: not a verdict to record
            base.verdict, base.message, base.executed = "skip", why, False
            return base
    arch = nvcc_arch_for(tier, min_cc)
    argv = _command(layout, tier, arch, timeout)
    extra = {}
    if turn is not None and argv[0] == sys.executable:
        preload = preload_for(layout.python.text if layout.python else "")
        extra = {"KBASE_WAIT_TURN": "1", "KBASE_PRELOAD": " ".join(preload)}
    try:
        res = run_sandboxed(
            argv,
            {f.name: f.text for f in layout.files},
            limits,
            lambda w: {**_tier_env(tier, w, arch, min_cc, settings.workers), **extra},
            sandboxed=sandboxed,
            gpu=spec.sees_gpu,
            userns=userns,
            literals=list(getattr(skill.meta, "literal_triggers", []) or []),
            on_timeout_grace_s=1.0 if argv[0] == sys.executable else 0.0,
            turn=turn,
            hardening=hardening,
        )
    except SandboxUnavailable as exc:
        base.verdict, base.executed = "skip", False
        base.message = f"not run: no sandbox ({exc}); pass --unsafe-no-sandbox to run unisolated"
        return base
    except OSError as exc:
        base.message = f"could not prepare the run: {exc}"
        return base
    return _judged(base, res, layout, limits, timeout, skill, tier)


def _judged(
    base: RunOutcome, res: Any, layout: Any, limits: Limits, timeout: float, skill: Any, tier: str
) -> RunOutcome:
    """`base` with the run's verdict, output and claims."""
    v = skill.meta.verification
    base.verdict, base.line, base.message = _judge(res, layout, limits, timeout)
    base.message = printable(base.message)
    base.duration_s = res.duration_s
    base.isolated = res.isolated
    base.limits = res.limits
    base.literals_seen = res.literals_seen
    base.output_tail = printable(tail(res.stderr + res.stdout))
    claims = list(getattr(skill.meta, "claims", []) or [])
    if base.verdict in ("pass", "fail") or res.measures:
        cv = judge_measures(claims, tier, list(v.tiers), res.measures, base.fingerprint)
        base.claims = cv.results
        if base.verdict == "pass":
            if cv.unknown or cv.missing:
                base.verdict, base.message = "error", cv.message()
            elif cv.failed:
                base.verdict, base.message = "fail", cv.message()
    if base.verdict == "pass" and res.memory_hit:
        base.message = (base.message + " (the run hit its memory limit)").strip()
    if base.verdict == "pass" and res.orphans_killed:
        killed = f" ({res.orphans_killed} leftover process(es) killed)"
        base.message = (base.message + killed).strip()
    return base


SKIP_EXIT = 77  # the automake convention: "this test cannot run here"

# host-side allocation failures only: "CUDA out of memory" is the device, not our limit
_MEMORY_SIGNS = ("MemoryError", "can't allocate memory", "std::bad_alloc", "Cannot allocate memory")


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
    if rc == 0 and not res.completed:
        # exit status 0 without the completion record: os._exit(0) from an exit hook, a
        # re-executed interpreter, a forged sandbox status. The snippet did not finish.
        why = "exited 0 without finishing its main (os._exit, an exit hook or a re-exec?)"
        return "fail", locate_failure(layout, output), why
    if rc == 0:
        return "pass", None, _last_line(res.stdout)
    if rc == SKIP_EXIT:
        why = _last_line(res.stdout + "\n" + res.stderr)
        return "skip", None, why or "the snippet skipped itself (exit 77)"
    line = locate_failure(layout, output)
    hit = f"memory limit ({limits.memory_mb} MiB for the run) hit" if res.memory_hit else ""
    if res.pids_hit:
        hit = (hit + "; " if hit else "") + f"process limit ({limits.pids}) hit"
    if rc is not None and rc < 0:
        if -rc == signal.SIGXCPU:
            return "killed", line, f"CPU-time limit exceeded ({res.signal_name})"
        if -rc == signal.SIGXFSZ:
            return "killed", line, f"file-size limit ({limits.disk_mb} MiB) exceeded (SIGXFSZ)"
        why = f"killed by {res.signal_name}"
        if hit:
            why += f": {hit}"
        elif -rc == signal.SIGKILL:
            why += " (out of memory, or killed from outside)"
        return "killed", line, why
    last = _last_line(res.stderr) or _last_line(res.stdout) or f"exit status {rc}"
    if hit:
        last = f"{hit}: {last}"
    elif any(sign in output for sign in _MEMORY_SIGNS) and limits.memory_mb:
        last = f"memory limit ({limits.memory_mb} MiB) hit: {last}"
    return "fail", line, last


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
    plan = [(s, tier, why) for s in skills for tier, why in plan_skill(s, settings.tier)]
    for order, (skill, tier, reason) in enumerate(plan):
        if reason is None:
            jobs.append((order, skill, tier))
            continue
        outcomes[order] = RunOutcome(
            skill.name, tier, "skip", 0.0, message=reason, snippet_sha256=skill.snippet_sha256()
        )
        if on_done:
            on_done(outcomes[order])
    if jobs and not settings.unsafe_no_sandbox:
        ok, why = sandbox_status()
        if not ok:
            raise SandboxUnavailable(
                f"refusing to run snippets without the sandbox: {why}. Install bubblewrap "
                "(apt-get install bubblewrap) or pass --unsafe-no-sandbox (such runs never verify)"
            )
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


def _terminate_as_interrupt() -> Callable[[], object]:
    """Make SIGTERM (what CI sends on cancel) unwind like Ctrl-C; returns the undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def raise_interrupt(_sig, _frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    return lambda: signal.signal(signal.SIGTERM, previous)


def isolation_note(settings: RunSettings, outcomes: list[RunOutcome] | None = None) -> str | None:
    """None when every snippet ran in the sandbox, else why (some of) them did not."""
    if settings.unsafe_no_sandbox:
        return "snippets ran WITHOUT the sandbox (--unsafe-no-sandbox): their rows never verify"
    ok, why = sandbox_status()
    if not ok:
        return f"no sandbox here ({why}): nothing was run"
    open_runs = [o for o in outcomes or [] if o.executed and not o.isolated]
    if open_runs:
        return f"{len(open_runs)} run(s) ran outside the sandbox"
    return None
