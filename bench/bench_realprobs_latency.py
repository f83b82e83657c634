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

# Answers one question per stdin line with the wall and the process CPU milliseconds (all threads:
# the query embedding's, BM25's) of KnowledgeBase.query. CPU time moves less than wall time with
# the load that other work puts on a shared machine.
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
    t, c = time.perf_counter(), time.process_time()
    kb.query(SearchQuery.parse(query=q, k=10, kind="skill"))
    print((time.perf_counter() - t) * 1000, (time.process_time() - c) * 1000, flush=True)
"""
KEYS = ("p50_ms", "p95_ms", "cpu_p50_ms", "cold_cli_s")
HEADS = ("warm p50 ms", "warm p95 ms", "CPU p50 ms", "cold CLI s")
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


def ask(p: subprocess.Popen, q: str) -> tuple[float, float]:
    """(wall ms, CPU ms) of one search."""
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(json.dumps(q) + "\n")
    p.stdin.flush()
    wall, cpu = p.stdout.readline().split()
    return float(wall), float(cpu)


def cold(python: str, work: Path, q: str) -> float:
    env = {**os.environ, "KBASE_HOME": str(work / "home")}
    cmd = [python, "-m", "kbase.cli", "search", q, "--json", "-k", "5", "--root", str(work / "kb")]
    t = time.perf_counter()
    subprocess.run(cmd, capture_output=True, env=env, cwd=tempfile.gettempdir(), check=True)
    return time.perf_counter() - t


def summary(got: list[tuple[float, float]]) -> dict:
    s = sorted(w for w, _ in got)
    return {
        "p50_ms": round(statistics.median(s), 2),
        "p95_ms": round(s[int(0.95 * len(s))], 2),
        "cpu_p50_ms": round(statistics.median(c for _, c in got), 2),
    }


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
    warm: dict[str, list[tuple[float, float]]] = {n: [] for n in sides}
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
    res["ratio_this_over_other"] = {k: round(a[k] / b[k], 3) if b[k] else None for k in KEYS}
    print(f"{'side':8s} " + " ".join(f"{h:>12s}" for h in HEADS))
    for n, r in [*res["sides"].items(), ("ratio", res["ratio_this_over_other"])]:
        print(f"{n:8s} " + " ".join(f"{r[k]:>12}" for k in KEYS))
    print(f"wrote {write_result('realprobs-latency', res)}", file=sys.stderr)


if __name__ == "__main__":
    main()
