"""The GPU device gate: timing runs hold the device alone, correctness runs share it, and a
skill cannot declare a timing snippet `shared` (lint)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from kbase.ingest.skills import lint_paths, load_skill
from kbase.validators.device_gate import DeviceGate, device_use_of, gpu_use, markers_in

from tests.test_claims import SPEEDUP, write


def _run_through(gate: DeviceGate, uses: list[str], hold_s: float = 0.05) -> list[tuple]:
    """Each use in its own thread; returns (use, start, end) intervals as the gate let them run."""
    spans: list[tuple] = []
    lock = threading.Lock()

    def work(use: str) -> None:
        with gate.hold(use):
            start = time.monotonic()
            time.sleep(hold_s)
            with lock:
                spans.append((use, start, time.monotonic()))

    threads = [threading.Thread(target=work, args=(u,)) for u in uses]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return spans


def _overlap(a: tuple, b: tuple) -> bool:
    return a[1] < b[2] and b[1] < a[2]


def test_exclusive_runs_never_overlap_anything_and_shared_runs_overlap_each_other():
    uses = ["shared", "exclusive", "shared", "shared", "exclusive", "shared", "shared"]
    spans = _run_through(DeviceGate(), uses)
    assert len(spans) == len(uses)
    for i, a in enumerate(spans):
        for b in spans[i + 1 :]:
            if "exclusive" in (a[0], b[0]):
                assert not _overlap(a, b), (a, b)
    shared = [s for s in spans if s[0] == "shared"]
    assert any(_overlap(a, b) for i, a in enumerate(shared) for b in shared[i + 1 :])


def test_a_waiting_exclusive_run_is_not_starved_by_a_stream_of_shared_runs():
    gate = DeviceGate()
    order: list[str] = []
    release = threading.Event()

    def shared(tag: str) -> None:
        with gate.hold("shared"):
            order.append(tag)
            release.wait(5)

    first = threading.Thread(target=shared, args=("s1",))
    first.start()
    time.sleep(0.05)

    def exclusive() -> None:
        with gate.hold("exclusive"):
            order.append("x")

    excl = threading.Thread(target=exclusive)
    excl.start()
    time.sleep(0.05)
    late = threading.Thread(target=shared, args=("s2",))
    late.start()
    time.sleep(0.05)
    assert order == ["s1"]  # s2 queues behind the waiting exclusive run
    release.set()
    for t in (first, excl, late):
        t.join(5)
    assert order == ["s1", "x", "s2"]


def test_markers_make_a_snippet_exclusive():
    assert gpu_use(None, "ms = triton.testing.do_bench(fn)") == "exclusive"
    assert gpu_use(None, "start.elapsed_time(end)") == "exclusive"
    assert gpu_use(None, "free, total = torch.cuda.mem_get_info()") == "exclusive"
    assert gpu_use(None, "torch.testing.assert_close(out, ref)") == "shared"
    assert gpu_use("exclusive", "torch.testing.assert_close(out, ref)") == "exclusive"
    assert gpu_use("shared", "t0 = time.perf_counter()") == "exclusive"
    assert markers_in("perf_counter(); perf_counter(); do_bench") == ["perf_counter", "do_bench"]


def test_shared_declared_for_a_timing_snippet_is_a_lint_problem(tmp_path: Path):
    path = write(
        tmp_path,
        "timed",
        SPEEDUP,
        'import time\nt = time.perf_counter()\nprint("KBASE_MEASURE speedup 2")',
    )
    text = path.read_text().replace("timeout_s: 30,", "timeout_s: 30, gpu_use: shared,")
    path.write_text(text)
    problems = [str(p) for p in lint_paths([path], tmp_path)]
    assert any("gpu_use" in p and "perf_counter" in p for p in problems), problems
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "gpu_use" in ln)
    assert any(f"SKILL.md:{line}:" in p for p in problems), problems
    assert device_use_of(load_skill(path, tmp_path)) == "exclusive"


def test_the_corpus_declares_no_shared_timing_snippet():
    root = Path(__file__).resolve().parents[1]
    problems = [str(p) for p in lint_paths(sorted(root.glob("skills/*/SKILL.md")), root)]
    assert not [p for p in problems if "gpu_use" in p]


PRELOAD_PROBE = """import sys
print("PRELOADED", "numpy" in sys.modules)
import numpy
print("KBASE_MEASURE speedup 2")"""


def _turn_after(delay_s: float, log: list):
    """A turn that is granted only after delay_s, like a GPU another run holds."""
    from contextlib import contextmanager

    @contextmanager
    def turn():
        time.sleep(delay_s)
        log.append("granted")
        yield
        log.append("released")

    return turn


def test_a_run_prepares_before_its_turn_and_its_clock_starts_at_go(tmp_path: Path):
    from kbase.validators.runner import RunSettings, _run_tier

    path = write(tmp_path, "probe", SPEEDUP, PRELOAD_PROBE)
    log: list = []
    out = _run_tier(
        load_skill(path, tmp_path), "cpu-interpret", RunSettings(), turn=_turn_after(1.5, log)
    )
    assert out.verdict == "pass", out.output_tail
    assert log == ["granted", "released"]
    assert "PRELOADED True" in out.output_tail  # imported while waiting for the turn
    assert out.duration_s < 1.5  # the wait is not the snippet's time


def test_no_preload_when_the_snippet_sets_its_own_environment(tmp_path: Path):
    from kbase.validators.device_gate import preload_for
    from kbase.validators.runner import RunSettings, _run_tier

    code = 'import os\nos.environ["TORCH_LOGS"] = "graph_breaks"\n' + PRELOAD_PROBE
    assert preload_for(code) == []
    assert preload_for(PRELOAD_PROBE) == ["numpy"]
    assert preload_for("import torch\nimport triton.language as tl") == [
        "torch",
        "triton",
        "triton.language",
    ]
    path = write(tmp_path, "envset", SPEEDUP, code)
    out = _run_tier(
        load_skill(path, tmp_path), "cpu-interpret", RunSettings(), turn=_turn_after(0, [])
    )
    assert out.verdict == "pass" and "PRELOADED False" in out.output_tail, out.output_tail


def test_the_timeout_counts_from_go_and_still_holds(tmp_path: Path):
    from kbase.validators.runner import RunSettings, _run_tier

    path = write(tmp_path, "sleeper", SPEEDUP, "import time\ntime.sleep(60)")
    out = _run_tier(
        load_skill(path, tmp_path),
        "cpu-interpret",
        RunSettings(timeout_s=3),
        turn=_turn_after(2.0, []),
    )
    assert out.verdict == "timeout", out
    assert 2.5 < out.duration_s < 8
