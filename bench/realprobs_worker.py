#!/usr/bin/env python3
"""One side of bench/bench_realprobs.py: index a skills folder with whichever `kbase` this
interpreter imports (this checkout's venv, or another checkout's Python) and answer every question.

    python bench/realprobs_worker.py SKILLS_DIR WORK_DIR QUESTIONS.json > answers.json

Prints JSON: per question the ranked skill ids (top 10), the answer's `no_good_match` and each hit's
`confidence` when that kbase has them (null otherwise), its `candidates` list when present, and the
search's wall time. Imports only the public API, so it runs against older checkouts too.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path


def main() -> None:
    skills, work, questions = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    from kbase.api import KnowledgeBase
    from kbase.schema import SearchQuery

    root = work / "kb"
    shutil.rmtree(root, ignore_errors=True)
    (root / "pr_archive").mkdir(parents=True)
    shutil.copytree(skills, root / "skills")
    kb = KnowledgeBase(root=root, home=work / "home")
    t = time.perf_counter()
    kb.index()
    index_s = time.perf_counter() - t
    kb.search("warm up", k=3, kind="skill")
    out = []
    for q in json.loads(questions.read_text(encoding="utf-8")):
        t = time.perf_counter()
        res = kb.query(SearchQuery.parse(query=q, k=10, kind="skill"))
        ms = (time.perf_counter() - t) * 1000
        cands = getattr(res, "candidates", None)
        out.append(
            {
                "ids": [h.id for h in res.hits],
                "no_good_match": getattr(res, "no_good_match", None),
                "confidence": [getattr(h, "confidence", None) for h in res.hits],
                "candidates": [c.id for c in cands] if cands else None,
                "candidates_chars": len(json.dumps([c.model_dump() for c in cands]))
                if cands
                else None,
                "ms": round(ms, 3),
            }
        )
    json.dump({"index_s": round(index_s, 2), "answers": out}, sys.stdout)


if __name__ == "__main__":
    main()
