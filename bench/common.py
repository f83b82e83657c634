"""Helpers shared by the benchmarks: result files, tables, percentiles, shared data."""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the shared histories (../shared); KBASE_SHARED points elsewhere, e.g. from a git worktree
SHARED = Path(os.environ.get("KBASE_SHARED") or REPO.parent / "shared")
HISTORIES = ("deepgemm", "flash-attention", "lmdeploy", "flashinfer")


def children_cpu() -> float:
    """CPU seconds of every child process waited for so far (user + system)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def mine_cmd(repo: Path, root: Path, name: str, *extra: str) -> list[str]:
    """`kbase mine` of one repository into root, with its recipe when the project has one."""
    recipe = REPO / "pr_archive" / "recipes" / f"{name}.yaml"
    return [
        sys.executable,
        "-m",
        "kbase.cli",
        "mine",
        "--repo",
        str(repo),
        "--name",
        name,
        "--root",
        str(root),
        *(["--recipe", str(recipe)] if recipe.exists() else []),  # none: mined without one
        *extra,
        "--json",
    ]


RESULTS = REPO / "bench" / "results"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    i = min(len(s) - 1, max(0, int(round(q / 100 * (len(s) - 1)))))
    return s[i]


def summary_ms(samples_s: list[float]) -> dict:
    ms = [x * 1000 for x in samples_s]
    return {
        "p50_ms": round(percentile(ms, 50), 3),
        "p95_ms": round(percentile(ms, 95), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
        "n": len(ms),
    }


# CPU features that set the speed of ONNX Runtime's int8 and fp32 kernels: two machines of the
# same kind here, with and without AVX-512 VNNI, built an index at 93 and 254 entries/s
_CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")


def cpu_info() -> str:
    """The CPU's model name and the feature flags of _CPU_FLAGS it has (Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    fields = dict(
        (k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in text.splitlines()[:40])
    )
    flags = set(fields.get("flags", "").split())
    have = [f for f in _CPU_FLAGS if f in flags]
    return f"{fields.get('model name', 'unknown')} ({' '.join(have) or 'no AVX2'})"


def write_result(name: str, data: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    data = {
        "bench": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": platform.platform(),
        "cpu": cpu_info(),
        "python": platform.python_version(),
        **data,
    }
    out = RESULTS / f"{name}.json"
    out.write_text(json.dumps(data, indent=1, ensure_ascii=False))
    return out


def question_pool() -> list[str]:
    """Every distinct question of every eval set: texts the model has not embedded yet."""
    import yaml

    out: list[str] = []
    for f in sorted((REPO / "tests" / "eval").glob("*.yaml")):
        for row in yaml.safe_load(f.read_text(encoding="utf-8")) or []:
            if isinstance(row, dict) and row.get("query"):
                out.append(str(row["query"]))
    return list(dict.fromkeys(out))


def interpreter(name: str) -> str:
    """The Python interpreter `name` runs, not its launcher: pyenv's shims are shell scripts,
    ~0.1-0.2 s a start, which a start-up benchmark would count."""
    import shutil
    import subprocess

    return subprocess.run(
        [shutil.which(name) or name, "-c", "import sys; print(sys.executable)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
