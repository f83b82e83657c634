#!/usr/bin/env python3
"""Where a cold `kbase search --json` spends its time, stage by stage (issue #11).

    python bench/bench_cold_stages.py --home H --root R [--runs 5]

Each run is a fresh interpreter (bytecode cached under PYTHONPYCACHEPREFIX, as bench_cold.py
does) that takes a search's steps one after the other on one thread, timing each
(wall and CPU): the imports, the query's validation, the ONNX query model (session and
tokenizer), the index, the query plan, BM25, the dense retriever, the rest of the answer and
the JSON. The real command overlaps the model's loading with the index's on a second thread;
here they run in turn, so each is seen alone. Prints the median of each stage over --runs and
writes bench/results/cold-stages.json. The home is only read (copy /tmp/kbw first if in doubt).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import index_args, write_result  # noqa: E402

# One cold search, step by step; prints {stage: [wall s, cpu s]} as JSON on its last line.
STAGES = r"""
import gc, json, sys, time
t0 = time.perf_counter(); c0 = time.process_time(); out = {}; last = [t0, c0]
def mark(name):
    t, c = time.perf_counter(), time.process_time()
    out[name] = [t - last[0], c - last[1]]; last[:] = [t, c]
import numpy; mark("import numpy")
from kbase.schema import Entry, SearchQuery, SearchResult, SkillAudit  # what a search defines
mark("import pydantic + the search's kbase.schema models")
import os; os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
from kbase.envspec import parse_env
q = SearchQuery.parse(env=parse_env(None), query=sys.argv[1])
mark("SearchQuery.parse (first validator)")
from kbase.api import KnowledgeBase
kb = KnowledgeBase(root=os.environ.get("KBASE_ROOT"), one_query=True)
kb.is_indexed(); mark("import kbase.api, settings")
import onnxruntime, tokenizers; mark("import onnxruntime, tokenizers")
emb = kb.query_embedder(); mark("ONNX session + tokenizer")
s = kb.searcher(); idx = s.index(); mark("import searcher, load index")
from kbase.retrieval.query import plan
qp = plan(q.query); mark("query plan")
bm = s._bm25(idx, qp.lexical, None); mark("BM25")
vec = s._embed(qp.dense); mark("embed the query")
de = s._dense(idx, qp.dense, None, None, [], None, None, vec); mark("dense (vector files)")
res = kb._answer(q); mark("answer: search again (warm), statuses, hits")
text = json.dumps(res.model_dump(mode="json"), ensure_ascii=False, default=str); mark("JSON")
out["total in process"] = [time.perf_counter() - t0, time.process_time() - c0]
print(json.dumps(out))
"""


def main() -> None:
    ap = index_args(__doc__ or "", "the root the home was built from", "an index home (read only)")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kbase-stages-"))
    env = {**os.environ, "KBASE_HOME": str(args.home), "KBASE_ROOT": str(args.root)}
    env.pop("PYDANTIC_DISABLE_PLUGINS", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    runs: list[dict] = []
    for i in range(args.runs + 1):  # the first fills the bytecode cache
        got = subprocess.run(
            [sys.executable, "-c", STAGES, f"warp shuffle reduction gives wrong sum {i}"],
            capture_output=True,
            text=True,
            env=env,
            cwd=work,  # not a checkout: its kbase/ would be imported ahead of this one's
            check=True,
        )
        if i:
            runs.append(json.loads(got.stdout.strip().splitlines()[-1]))
    stages = {
        name: {
            "wall_ms": round(1000 * statistics.median(r[name][0] for r in runs), 1),
            "cpu_ms": round(1000 * statistics.median(r[name][1] for r in runs), 1),
        }
        for name in runs[0]
    }
    load = [round(x, 2) for x in os.getloadavg()]
    print(f"cold search stages, median of {args.runs} runs, load average {load}")
    print(f"{'stage':40s} {'wall ms':>9s} {'CPU ms':>9s}")
    for name, r in stages.items():
        print(f"{name:40s} {r['wall_ms']:9.1f} {r['cpu_ms']:9.1f}")
    out = write_result(
        "cold-stages",
        {"home": str(args.home), "runs": args.runs, "load_avg_1_5_15": load, "stages": stages},
    )
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
