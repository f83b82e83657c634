#!/usr/bin/env python3
"""Search latency on the real-problem questions (issue #25), this checkout and another one side by
side, interleaved so that load from elsewhere on a shared machine falls on both alike.

    python bench/bench_realprobs_latency.py --work /tmp/kbase-realprobs [--other-python python3]
                                            [--cold-runs 5]

Reuses the indexes bench/bench_realprobs.py built under WORK/this and WORK/other (run it first
with the same --work). Each side loads its index in a process of its own and answers every
question of bench/realprobs.yaml once (kind=skill, k=10, unseen text: the query-embedding cache
never answers), in turn: A then B for one question, B then A for the next. Cold: `kbase search
--json` in a fresh process per side, alternated, median of --cold-runs. Reports p50/p95 per side
and the ratio this/other (below 1: this checkout is faster); writes
bench/results/realprobs-latency.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, write_result  # noqa: E402

# Answers one question per stdin line with the wall milliseconds of KnowledgeBase.query.
SERVE = """
import json, sys, time
from pathlib import Path
from kbase.api import KnowledgeBase
from kbase.schema import SearchQuery
w = Path(sys.argv[1])
kb = KnowledgeBase(root=w / "kb", home=w / "home")
kb.search("warm up", k=3, kind="skill")
print("ready", flush=True)
for line in sys.stdin:
    q = json.loads(line)
    t = time.perf_counter()
    kb.query(SearchQuery.parse(query=q, k=10, kind="skill"))
    print(round((time.perf_counter() - t) * 1000, 3), flush=True)
"""
COLD_QUERY = "out of resource: shared memory, Required: 131072, Hardware limit: 101376"


def start(python: str, work: Path) -> subprocess.Popen:
    if not (work / "home").is_dir():
        raise SystemExit(f"{work}/home: no index; run bench/bench_realprobs.py --work first")
    p = subprocess.Popen(
        [python, "-c", SERVE, str(work)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=tempfile.gettempdir(),  # a neutral folder: the side's own kbase is imported
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def ask(p: subprocess.Popen, q: str) -> float:
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(json.dumps(q) + "\n")
    p.stdin.flush()
    return float(p.stdout.readline())


def cold(python: str, work: Path, q: str) -> float:
    env = {**os.environ, "KBASE_HOME": str(work / "home")}
    cmd = [python, "-m", "kbase.cli", "search", q, "--json", "-k", "5", "--root", str(work / "kb")]
    t = time.perf_counter()
    subprocess.run(cmd, capture_output=True, env=env, cwd=tempfile.gettempdir(), check=True)
    return time.perf_counter() - t


def summary(ms: list[float]) -> dict:
    s = sorted(ms)
    return {"p50_ms": round(statistics.median(s), 2), "p95_ms": round(s[int(0.95 * len(s))], 2)}


def main() -> None:
    import realprobs as R

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--other-python", default="python3")
    ap.add_argument("--cold-runs", type=int, default=5)
    args = ap.parse_args()
    sides = {"this": sys.executable, "other": args.other_python}
    queries = [p.query for p in R.load(REPO / "bench" / "realprobs.yaml")]
    procs = {n: start(py, args.work / n) for n, py in sides.items()}
    warm: dict[str, list[float]] = {n: [] for n in sides}
    for i, q in enumerate(queries):
        for n in list(sides)[:: 1 if i % 2 == 0 else -1]:
            warm[n].append(ask(procs[n], q))
    for p in procs.values():
        assert p.stdin is not None
        p.stdin.close()
        p.wait()
    cold_s: dict[str, list[float]] = {n: [] for n in sides}
    for i in range(args.cold_runs):
        for n in list(sides)[:: 1 if i % 2 == 0 else -1]:
            cold_s[n].append(cold(sides[n], args.work / n, f"{COLD_QUERY} run {i}"))
    res: dict = {"questions": len(queries), "sides": {}}
    for n in sides:
        res["sides"][n] = summary(warm[n]) | {"cold_cli_s": round(statistics.median(cold_s[n]), 3)}
    a, b = res["sides"]["this"], res["sides"]["other"]
    res["ratio_this_over_other"] = {
        k: round(a[k] / b[k], 3) if b[k] else None for k in ("p50_ms", "p95_ms", "cold_cli_s")
    }
    print(f"{'side':8s} {'warm p50 ms':>12s} {'warm p95 ms':>12s} {'cold CLI s':>11s}")
    for n, r in [*res["sides"].items(), ("ratio", res["ratio_this_over_other"])]:
        print(f"{n:8s} {r['p50_ms']:>12} {r['p95_ms']:>12} {r['cold_cli_s']:>11}")
    print(f"wrote {write_result('realprobs-latency', res)}", file=sys.stderr)


if __name__ == "__main__":
    main()
