#!/usr/bin/env python3
"""Retrieval quality on the hand-written dev sets of issue #11, per mode and per half, plus the
project's older sets (tests/eval/skills_*.yaml).

    python bench/bench_devsets.py [--work /tmp/kbase-devsets] [--limit N] [--blind]

Builds (or reuses) the knowledge base of bench/devset_kb.py: the shipped skills plus the four
shared histories replayed and mined. PR questions search kind=pr, skill questions kind=skill.
Prints a table and writes bench/results/devsets.json (scores, misses, unanswerable questions).
--blind is for tuning: the tune halves only, no test figure asked, printed or written
(bench/results/devsets-blind.json).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, write_result  # noqa: E402
from devset_kb import build_kb  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

MODES = ("hybrid", "bm25", "dense", "rrf")
KIND = {"prs": "pr", "skills": "skill"}


def run(kb, modes=MODES, halves: tuple[str, ...] = ("tune", "test")) -> dict:
    import devsets as D
    from eval_scores import load_queries

    idx = kb.searcher().index()
    ids = {e.id for e in idx.entries}
    result: dict = {"sets": {}, "older": {}}
    for name in D.SETS:
        queries = D.load(REPO / "tests" / "eval", name)
        ok, missing = D.known(queries, ids)
        ok = [q for q in ok if q.half in halves]
        kind = KIND[name]

        def search(q: str, mode: str, kind: str = kind) -> list[str]:
            return _ranked(kb, q, kind, mode)

        t = time.perf_counter()
        scores = D.evaluate(search, ok, modes)
        for per in scores.values():
            for h in set(D.HALVES) - set(halves):
                del per[h]
        result["sets"][name] = {
            "queries": len(queries),
            "unanswerable": [q.query for q in missing],
            "seconds": round(time.perf_counter() - t, 1),
            "modes": {m: {h: s.as_dict() for h, s in per.items()} for m, per in scores.items()},
            "hybrid_test_misses": (
                scores["hybrid"]["test"].misses if "test" in halves and "hybrid" in scores else []
            ),
        }
    older = load_queries(REPO / "tests" / "eval", "skills_*.yaml")
    older_q = [D.DevQuery(q.query, q.expected, "older") for q in older]
    for m in modes:
        rows = [(q, _ranked(kb, q.query, "skill", m)) for q in older_q]
        result["older"][m] = D.score(rows).as_dict()
    result["older_queries"] = len(older_q)
    return result


def _ranked(kb, query: str, kind: str, mode: str) -> list[str]:
    """The top 10 entry ids; "rrf", the old reciprocal-rank fusion, is hybrid with its weights."""
    from kbase.retrieval.fusion import DEFAULT_WEIGHTS

    if mode == "rrf":
        got = kb.searcher().search(query, k=10, kind=kind, weights=DEFAULT_WEIGHTS)
    else:
        got = kb.searcher().search(query, k=10, kind=kind, mode=mode)
    return [c.entry.id for c in got]


def print_tables(res: dict, console: Console) -> None:
    for name, r in res["sets"].items():
        t = Table(
            title=f"dev set {name}: {r['queries']} questions "
            f"({len(r['unanswerable'])} not in the index), Hit@1 / Hit@5 / MRR",
            title_justify="left",
        )
        t.add_column("mode")
        halves = list(r["modes"][next(iter(r["modes"]))])
        for h in halves:
            t.add_column(f"{h} (n={r['modes'][next(iter(r['modes']))][h]['n']})", justify="right")
        for m, per in r["modes"].items():
            t.add_row(
                m,
                *(
                    f"{per[h]['hit@1']:.3f} / {per[h]['hit@5']:.3f} / {per[h]['mrr']:.3f}"
                    for h in halves
                ),
            )
        console.print(t)
    t = Table(title=f"older skill set ({res['older_queries']} queries)", title_justify="left")
    for col in ("mode", "Hit@1", "Hit@5", "MRR"):
        t.add_column(col)
    for m, s in res["older"].items():
        t.add_row(m, f"{s['hit@1']:.3f}", f"{s['hit@5']:.3f}", f"{s['mrr']:.3f}")
    console.print(t)


def main() -> None:
    import devsets as D

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--work", type=Path, default=None, help="work folder to keep and reuse")
    ap.add_argument("--limit", type=int, default=None, help="replay only the first N commits")
    ap.add_argument(
        "--no-mine", action="store_true", help="reuse the archives already mined in --work"
    )
    ap.add_argument("--blind", action="store_true", help="tune halves only: no test figures")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="kbase-devsets-"))
    kb = build_kb(work, args.limit, mine=not args.no_mine)
    kb.warm_up()
    res = run(kb, halves=("tune",) if args.blind else D.HALVES)
    print_tables(res, Console(width=140))
    out = write_result("devsets-blind" if args.blind else "devsets", {"work": str(work), **res})
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
