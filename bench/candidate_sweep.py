#!/usr/bin/env python3
"""How long the compact candidate list should be (issue #25): for each length, how often it holds a
fixing skill on the TUNE half of bench/realprobs.yaml, and how many characters it takes as JSON.
The test half is never read here. Indexes the shipped skills into a work folder first.

    python bench/candidate_sweep.py [--work /tmp/kbase-candsweep] [--sizes 10 12 13 15]

Prints a table; writes bench/results/candidate_sweep.json. The chosen length lives in
kbase/api_search.py (CANDIDATES); MCP's answer budget then decides how long each line may be.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import realprobs as R  # noqa: E402
from common import REPO, write_result  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/kbase-candsweep"))
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 12, 13, 15])
    a = ap.parse_args()
    import kbase.api_search as AS
    from kbase.api import KnowledgeBase
    from kbase.schema import SearchQuery

    rows = [p for p in R.load(REPO / "bench" / "realprobs.yaml") if p.half == "tune"]
    root = a.work / "kb"
    shutil.rmtree(a.work, ignore_errors=True)
    (root / "pr_archive").mkdir(parents=True)
    shutil.copytree(REPO / "skills", root / "skills")
    kb = KnowledgeBase(root=root, home=a.work / "home")
    kb.index()
    table = []
    for size in a.sizes:
        AS.CANDIDATES = size  # the façade reads it per search
        held, chars = [], []
        for p in rows:
            res = kb.query(SearchQuery.parse(query=p.query, k=10, kind="skill"))
            chars.append(len(json.dumps([c.model_dump(mode="json") for c in res.candidates])))
            if p.covered:
                held.append(any(c.id in p.expected for c in res.candidates))
        chars.sort()
        table.append(
            {
                "size": size,
                "holds_fix": round(sum(held) / len(held), 4),
                "chars_p50": chars[len(chars) // 2],
                "chars_max": chars[-1],
            }
        )
    print(f"tune half: {sum(p.covered for p in rows)} covered of {len(rows)} problems")
    print(f"{'size':>5} {'holds fix':>10} {'chars p50':>10} {'chars max':>10}")
    for t in table:
        print(f"{t['size']:>5} {t['holds_fix']:>10.3f} {t['chars_p50']:>10} {t['chars_max']:>10}")
    print("wrote", write_result("candidate_sweep", {"half": "tune", "sizes": table}))


if __name__ == "__main__":
    main()
