#!/usr/bin/env python3
"""Search latency on the dev-set knowledge base (skills + four mined archives, ~5k entries):
warm p50/p95 per filter with every query text unseen (the query-embedding cache never answers),
the query embedding alone, cold `kbase search`, and re-indexing after one edit.

    python bench/bench_latency.py [--work /tmp/kbase-devsets] [--n 100] [--no-mine]

Writes bench/results/latency.json. The 100k-entry index is bench/bench_scale.py's: it builds
through the real `build_index` (vector files, title ids), which an index assembled by hand here
lacked, so its filtered figures measured a path no real index takes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import latency_args, question_pool, warm_latency, write_result  # noqa: E402
from devset_kb import build_kb  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402


def cold_search(kb, runs: int = 3) -> dict:
    env = {**os.environ, "KBASE_HOME": str(kb.home)}
    times = []
    for i in range(runs):
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "kbase.cli", "search", f"fp8 gemm cold start {i}", "--json"]
            + ["--root", str(kb.root)],
            check=True,
            capture_output=True,
            env=env,
        )
        times.append(time.perf_counter() - t)
    return {"median_s": round(statistics.median(times), 3), "runs_s": [round(x, 3) for x in times]}


def reindex_one_edit(kb) -> dict:
    kb.embedder()  # model load excluded (torch, and the ONNX session the index embeds with)
    kb.index_embedder()
    victim = sorted((kb.root / "skills").iterdir())[0] / "SKILL.md"
    text = victim.read_text(encoding="utf-8")
    victim.write_text(text + f"\n<!-- bench edit {time.time()} -->\n", encoding="utf-8")
    t = time.perf_counter()
    rep = kb.index()
    took = time.perf_counter() - t
    noop_t = time.perf_counter()
    noop = kb.index()
    return {
        "seconds": round(took, 3),
        "embedded": rep.embedded_entries,
        "stages_s": rep.as_dict()["seconds"],
        "noop_seconds": round(time.perf_counter() - noop_t, 3),
        "noop_embedded": noop.embedded_entries,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--work", type=Path, default=None)
    latency_args(ap, 100)
    ap.add_argument(
        "--no-mine", action="store_true", help="reuse the archives already mined in --work"
    )
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="kbase-devsets-"))
    kb = build_kb(work, mine=not args.no_mine)
    entries = len(kb.searcher().index().entries)
    pool = question_pool()
    res: dict = {"entries": entries, "warm": warm_latency(kb, pool, args.n, args.repo, args.tag)}
    res["cold_search"] = cold_search(kb)
    res["reindex_one_edit"] = reindex_one_edit(kb)
    console = Console(width=140)
    for label, block, n_entries in (("warm latency", res["warm"], entries),):
        if not block:
            continue
        t = Table(title=f"{label}, {n_entries} entries, unseen query texts", title_justify="left")
        for col in ("case", "p50 ms", "p95 ms", "p50 / unfiltered"):
            t.add_column(col)
        for name, r in block.items():
            t.add_row(name, f"{r['p50_ms']:.1f}", f"{r['p95_ms']:.1f}", str(r["vs_unfiltered_p50"]))
        console.print(t)
    r = res["reindex_one_edit"]
    console.print(
        f"cold `kbase search`: {res['cold_search']['median_s']} s (median of 3); "
        f"re-index after one edit: {r['seconds']} s (embedded {r['embedded']}); "
        f"no-op re-index {r['noop_seconds']} s"
    )
    out = write_result("latency", {"work": str(work), **res})
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
