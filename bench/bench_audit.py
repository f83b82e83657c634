"""Benchmark the validators: full CPU-tier audit wall time with 1 and 2 workers, and per-snippet
overhead.

    python bench/bench_audit.py [--root .] [--workers 1 2] [--empty-runs 10] [--skip-audit]

The audit runs over a copy of the skills in a temporary root so the committed ledger is untouched.
Prints a rich table; writes bench/results/bench_audit.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from kbase.ingest.skills import load_skill, load_skills
from kbase.validators.fingerprint import fingerprint
from kbase.validators.runner import RunSettings, isolation_note, run_tier, verify_skills
from rich.console import Console
from rich.table import Table

EMPTY_SKILL = """---
name: empty-snippet
description: An empty snippet, to measure what the sandbox itself costs per run.
trigger: ["bench"]
steps: ["run"]
failure_modes: [{symptom: "-", cause: "-", fix: "-"}]
verification: {tiers: [cpu-interpret], timeout_s: 30, asserts: "nothing"}
audit: {date: 2026-01-01}
---
# Empty

```python verify
pass
```
"""


def bench_audit(root: Path, workers: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="kbase-bench-") as tmp:
        shutil.copytree(root / "skills", Path(tmp) / "skills")
        skills, problems = load_skills(Path(tmp), None)
        settings = RunSettings(tier="auto", workers=workers, root=Path(tmp))
        t0 = time.perf_counter()
        outcomes = verify_skills(skills, settings)
        wall = time.perf_counter() - t0
    ran = [o for o in outcomes if o.executed]
    return {
        "workers": workers,
        "skills": len(skills),
        "load_problems": len(problems),
        "runs": len(ran),
        "wall_s": round(wall, 2),
        "sum_run_s": round(sum(o.duration_s for o in ran), 2),
        "verdicts": dict(Counter(f"{o.tier}:{o.verdict}" for o in outcomes)),
        "slowest": sorted(((round(o.duration_s, 2), o.skill, o.tier) for o in ran), reverse=True)[
            :5
        ],
    }


def bench_empty(runs: int, isolate: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="kbase-bench-empty-") as tmp:
        path = Path(tmp) / "skills" / "empty-snippet" / "SKILL.md"
        path.parent.mkdir(parents=True)
        path.write_text(EMPTY_SKILL)
        skill = load_skill(path, Path(tmp))
        settings = RunSettings(tier="cpu-interpret", root=Path(tmp), unsafe_no_sandbox=not isolate)
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            out = run_tier(skill, "cpu-interpret", settings)
            times.append(time.perf_counter() - t0)
            assert out.verdict == "pass", out
    return {
        "isolate": isolate,
        "runs": runs,
        "median_ms": round(statistics.median(times) * 1000, 1),
        "min_ms": round(min(times) * 1000, 1),
        "max_ms": round(max(times) * 1000, 1),
    }


def bench_bare_python(runs: int) -> dict:
    """`python -c pass` outside any sandbox: the floor that the per-snippet overhead sits on."""
    import subprocess

    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - t0)
    return {"runs": runs, "median_ms": round(statistics.median(times) * 1000, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--root", default=".", help="knowledge-base root holding skills/")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--empty-runs", type=int, default=10)
    ap.add_argument(
        "--skip-audit", action="store_true", help="only measure the per-snippet overhead"
    )
    ap.add_argument("--out", default="bench/results/bench_audit.json")
    args = ap.parse_args()
    root = Path(args.root).resolve()
    if not (root / "skills").is_dir():
        print(f"error: {root}/skills does not exist (pass --root)", file=sys.stderr)
        return 2
    err = Console(stderr=True)
    result = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "fingerprint": fingerprint("cpu-interpret", root),
        "isolation_note": isolation_note(RunSettings()),
        "empty": [],
        "audit": [],
    }
    for isolate in (True, False):
        err.print(f"empty snippet x{args.empty_runs} (isolate={isolate}) ...")
        result["empty"].append(bench_empty(args.empty_runs, isolate))
    result["bare_python"] = bench_bare_python(args.empty_runs)
    if not args.skip_audit:
        for w in args.workers:
            err.print(f"CPU-tier audit of {root / 'skills'} with {w} worker(s) ...")
            result["audit"].append(bench_audit(root, w))

    table = Table(title="kbase validators benchmark")
    for col in ("measurement", "value", "detail"):
        table.add_column(col)
    for e in result["empty"]:
        table.add_row(
            f"empty snippet, {'bubblewrap sandbox' if e['isolate'] else '--unsafe-no-sandbox'}",
            f"{e['median_ms']} ms median",
            f"min {e['min_ms']} / max {e['max_ms']} ms over {e['runs']} runs",
        )
    table.add_row(
        "bare `python -c pass` (floor)",
        f"{result['bare_python']['median_ms']} ms median",
        "no sandbox, no workspace",
    )
    for a in result["audit"]:
        table.add_row(
            f"CPU-tier audit, -j {a['workers']}",
            f"{a['wall_s']} s wall",
            f"{a['skills']} skills, {a['runs']} runs, {a['sum_run_s']} s summed; "
            + ", ".join(f"{k}={v}" for k, v in sorted(a["verdicts"].items())),
        )
    if len(result["audit"]) >= 2:
        base = result["audit"][0]["wall_s"]
        for a in result["audit"][1:]:
            table.add_row(
                f"speed-up -j {a['workers']} vs -j {result['audit'][0]['workers']}",
                f"{base / a['wall_s']:.2f}x",
                "",
            )
    Console().print(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    err.print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
