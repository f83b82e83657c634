#!/usr/bin/env python3
"""One side of the dev-set A/B in bench/bench_realprobs.py --devsets: hybrid Hit@1/Hit@5/MRR per
hand-written set and half (tests/eval/devset_*.yaml) with whichever `kbase` this interpreter
imports, over a knowledge base built by bench/devset_kb.py (its skills replaced by SKILLS).

    python bench/devsets_worker.py WORK_DIR SKILLS_DIR EVAL_DIR > scores.json
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

KIND = {"prs": "pr", "skills": "skill"}


def main() -> None:
    work, skills, folder = (Path(a) for a in sys.argv[1:4])
    import devsets as D

    from kbase.api import KnowledgeBase

    shutil.rmtree(work / "kb" / "skills", ignore_errors=True)
    shutil.copytree(skills, work / "kb" / "skills")
    kb = KnowledgeBase(root=work / "kb", home=work / "home")
    kb.index()
    ids = {e.id for e in kb.searcher().index().entries}
    out = {}
    for name in D.SETS:
        ok, _ = D.known(D.load(folder, name), ids)

        def search(q: str, mode: str, kind: str = KIND[name]) -> list[str]:
            return [c.entry.id for c in kb.searcher().search(q, k=10, kind=kind, mode=mode)]

        got = D.evaluate(search, ok, ["hybrid"])["hybrid"]
        out[name] = {h: s.as_dict() for h, s in got.items()}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
