"""Who may share the GPU: a reader-writer gate over the device for `kbase verify -j N`
(`verification.gpu_use`, docs/skill-format.md). A correctness check gives the same answer beside
another run, a timing does not; startup is most of a short snippet's wall time, and sharing
overlaps it. A skill cannot declare its way out of a TIMING_MARKERS match."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# Calls that time, profile, or read state of the whole device. Over-matching only costs speed
# (an exclusive run); missing one would let another run distort a measurement, so this errs wide.
TIMING_MARKERS = re.compile(
    r"do_bench|elapsed_time|enable_timing|perf_counter|process_time|time\.time\(|monotonic"
    r"|timeit|benchmark\.Timer|Timer\(|cudaEventElapsedTime|cudaEventRecord|clock64\(|clock\(\)"
    r"|\bncu\b|\bnsys\b|torch\.profiler|profile\(|cupti|CUPTI"
    r"|mem_get_info|cudaMemGetInfo|set_per_process_memory_fraction|nvidia-smi|nvml"
)


def markers_in(text: str) -> list[str]:
    """The distinct timing/profiling/device-memory markers in a snippet, in order of appearance."""
    return list(dict.fromkeys(m.group(0) for m in TIMING_MARKERS.finditer(text)))


def gpu_use(declared: str | None, snippet_text: str) -> str:
    """'exclusive' or 'shared' for the GPU tier of one snippet."""
    return "exclusive" if declared == "exclusive" or markers_in(snippet_text) else "shared"


def device_use_of(skill) -> str:
    """'exclusive' or 'shared' for a loaded skill's GPU runs."""
    text = "\n".join(b.code for b in skill.snippet_blocks())
    return gpu_use(getattr(skill.meta.verification, "gpu_use", None), text)


# What the bootstrap may import before the run's turn. Only where the snippet sets no environment
# variable itself: some are read at import time (TORCH_LOGS, TRITON_* knobs), and an import ahead
# of the snippet's own would then miss them.
PRELOADABLE = ("numpy", "torch", "triton", "triton.language")
_SETS_ENV = re.compile(r"os\.environ\s*\[[^\]]*\]\s*=|os\.environ\.(update|setdefault)|putenv")


def preload_for(code: str) -> list[str]:
    if _SETS_ENV.search(code):
        return []
    return [
        m for m in PRELOADABLE if re.search(rf"^\s*(import|from)\s+{re.escape(m)}\b", code, re.M)
    ]


def lint_gpu_use(declared: str | None, snippet_text: str) -> str | None:
    """Why a declared `gpu_use: shared` cannot hold, or None."""
    found = markers_in(snippet_text)
    if declared == "shared" and found:
        return (
            "verification.gpu_use is 'shared' but the snippet times, profiles or reads "
            f"device-wide memory ({', '.join(found[:3])}): such runs hold the GPU alone"
        )
    return None


class DeviceGate:
    """Many shared holders or one exclusive holder; a waiting exclusive run blocks new shared
    ones, so a stream of short shared runs cannot starve a timing run."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting_exclusive = 0

    @contextmanager
    def hold(self, use: str) -> Iterator[None]:
        exclusive = use == "exclusive"
        with self._cond:
            if exclusive:
                self._waiting_exclusive += 1
                self._cond.wait_for(lambda: not self._exclusive and self._shared == 0)
                self._waiting_exclusive -= 1
                self._exclusive = True
            else:
                self._cond.wait_for(lambda: not self._exclusive and not self._waiting_exclusive)
                self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                if exclusive:
                    self._exclusive = False
                else:
                    self._shared -= 1
                self._cond.notify_all()
