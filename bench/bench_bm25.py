#!/usr/bin/env python3
"""Why BM25 is scored by kbase's own numpy code (retrieval/lexical.py) and not by bm25s (issue #24).

    python bench/bench_bm25.py [--root ROOT] [--queries 200]

Over every chunk of ROOT's skills and PR cards (default: this checkout; the ~6.5k-entry dev-set
knowledge base of bench/devset_kb.py is the realistic size), both libraries index the same
tokens: bm25s (`BM25().index`, then `get_scores` per query) and ours (`build_bm25`, then
`Lexical.scores` from a fresh reader, as a search does). Measured side by side in one run:
import time of each in a fresh interpreter, build time, the reader's load time, and query
time over the dev-set questions; every query's scores are compared (they must agree to 1e-5).
bm25s stays a test dependency: tests/test_lexical_reader.py checks ours against it.
Writes bench/results/bm25.json.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import REPO, percentile, write_result


def import_s(module: str) -> float:
    """Wall seconds to import `module` in a fresh interpreter (best of three)."""
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    runs = []
    for _ in range(3):
        runs.append(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True))
    return min(float(r.stdout) for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", type=Path, default=REPO)
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    import bm25s
    from eval_scores import load_queries
    from kbase.retrieval.collect import collect_entries
    from kbase.retrieval.lexical import Lexical, build_bm25, text_tokens
    from kbase.retrieval.tokenize import tokens

    entries, _, _ = collect_entries(args.root, {}, None, {})
    chunks = [c for e in entries for c in e.chunks]
    titles = [e.title for e in entries for _ in e.chunks]
    queries = [q.query for q in load_queries(REPO / "tests" / "eval")][: args.queries]
    t = time.perf_counter()  # both builds include tokenizing; ours also writes its files
    toks = [text_tokens(t, c.text) for t, c in zip(titles, chunks, strict=True)]
    ref = bm25s.BM25()
    ref.index(toks, show_progress=False)
    ref_build = time.perf_counter() - t
    out = Path(tempfile.mkdtemp(prefix="kbase-bm25-")) / "bm25"
    t = time.perf_counter()
    build_bm25(chunks, titles, out)
    our_build = time.perf_counter() - t
    t = time.perf_counter()
    ours = Lexical(out)
    ours.scores("warmup")
    our_load = time.perf_counter() - t

    ref_q, our_q, worst = [], [], 0.0
    for q in queries:
        qt = [x for x in ours.compounds(tokens(q)) if x in ref.vocab_dict]
        t = time.perf_counter()
        a = ref.get_scores(qt) if qt else np.zeros(len(chunks))
        ref_q.append(time.perf_counter() - t)
        t = time.perf_counter()
        b = ours.scores(q)
        our_q.append(time.perf_counter() - t)
        worst = max(worst, float(np.abs(a - b).max()) if len(a) else 0.0)
    res = {
        "root": str(args.root),
        "entries": len(entries),
        "chunks": len(chunks),
        "queries": len(queries),
        "import_s": {
            "bm25s": round(import_s("bm25s"), 3),
            "ours": round(import_s("kbase.retrieval.lexical"), 3),
        },
        "build_s": {"bm25s": round(ref_build, 3), "ours": round(our_build, 3)},
        "ours_reader_load_s": round(our_load, 3),
        "query_p50_ms": {
            "bm25s": round(percentile(ref_q, 50) * 1000, 3),
            "ours": round(percentile(our_q, 50) * 1000, 3),
        },
        "max_abs_score_difference": worst,
    }
    assert worst < 1e-4, f"scores differ by {worst}"
    for k, v in res.items():
        print(f"{k}: {v}")
    print(f"wrote {write_result('bm25', res)}", file=sys.stderr)


if __name__ == "__main__":
    main()
