#!/usr/bin/env python3
"""Warm search latency of two checkouts side by side, and whether they answer alike (issue #11).

    python bench/bench_ab_latency.py --home HOME --root ROOT --other PYTHON [--n 60] [--check]

Another checkout (A, the baseline: `--other`, the Python of a virtual environment with that
checkout installed editable) and this one (B: this interpreter) each load the index under HOME
in a process of their own and answer the same unseen questions (bench_scale's five cases: the
query embedding alone, unfiltered, kind=pr repo=X, kind=skill, a tag) one at a time, in turn:
A then B, then B then A, so that load from elsewhere on a shared machine falls on both alike.
Each side gets its own copy of ROOT (skill statuses and claim views are cached there under a key
that includes the code). Reports p50/p95 wall time and p50 process CPU time per case, and the
ratio B/A of the p50s (below 1: this checkout is faster).

--check also compares the answers: the hits of the public search, and the ranked candidates with
their scores (1e-6 relative). Chroma's HNSW can order tied neighbours differently in two
processes, so a pair is compared only where both processes got the same rows from Chroma; how
many differed that way is reported. Writes bench/results/ab-latency.json (or --out).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import percentile, question_pool, write_result  # noqa: E402


def cases(repo: str, tag: str) -> dict[str, dict]:
    return {
        "embedding alone": {},
        "unfiltered": {},
        f"kind=pr repo={repo}": {"kind": "pr", "repo": repo},
        "kind=skill": {"kind": "skill"},
        f"tag {tag}": {"tags": [tag]},
    }


def worker(root: Path, home: Path, spec: dict) -> None:
    """One side: reads {"q", "case", "check"} lines, writes one JSON line per question."""
    from kbase.retrieval import vectors as V

    import kbase
    from kbase.api import KnowledgeBase

    rows: list = []  # Chroma's rows of each query, for --check
    submit = V.VectorStore.submit_each

    def recording(self, vec, asks, background=True):
        wait = submit(self, vec, asks, background)

        def got():
            r = wait()
            rows.append([(c, round(d, 5)) for c, d in r])
            return r

        return got

    V.VectorStore.submit_each = recording
    kb = KnowledgeBase(root=root, home=home)
    kb.warm_up()
    emb = kb.query_embedder()
    print(json.dumps({"ready": kbase.__file__}), flush=True)

    def digest() -> str:
        out = hashlib.sha1(json.dumps(rows).encode()).hexdigest()
        rows.clear()
        return out

    for line in sys.stdin:
        req = json.loads(line)
        kw = spec[req["case"]]
        rows.clear()
        t, c = time.perf_counter(), time.process_time()
        hits = emb.embed_query(req["q"]) if req["case"] == "embedding alone" else None
        if hits is None:
            hits = kb.search(req["q"], k=5, **kw)
        out = {"wall": time.perf_counter() - t, "cpu": time.process_time() - c}
        if req.get("check") and req["case"] != "embedding alone":
            out["hits"] = [h.model_dump(mode="json") for h in hits]
            out["rows_hits"] = digest()
            cands = kb.searcher().search(req["q"], k=5, fill_texts=False, **kw)
            out["cands"] = [[c.entry.id, c.score, c.chunk_index] for c in cands]
            out["rows_cands"] = digest()
        print(json.dumps(out), flush=True)


class Side:
    def __init__(self, python: str, root: Path, home: Path, spec: dict):
        cmd = [python, __file__, "--worker", str(root), str(home), json.dumps(spec)]
        # cwd outside any checkout: `import kbase` finds the interpreter's own install
        self.p = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tempfile.gettempdir()
        )
        assert self.p.stdout is not None
        self.code = json.loads(self.p.stdout.readline())["ready"]

    def ask(self, req: dict) -> dict:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def close(self) -> None:
        assert self.p.stdin is not None
        self.p.stdin.close()
        self.p.wait()


def same(a: dict, b: dict) -> tuple[bool, int]:
    """(answers agree where Chroma's rows agree, how many of the two were comparable)."""
    ok, n = True, 0
    if a["rows_cands"] == b["rows_cands"]:
        n += 1
        ok &= len(a["cands"]) == len(b["cands"]) and all(
            x[0] == y[0] and x[2] == y[2] and abs(x[1] - y[1]) <= 1e-6 * max(1.0, abs(x[1]))
            for x, y in zip(a["cands"], b["cands"], strict=True)
        )
    if a["rows_hits"] == b["rows_hits"]:
        n += 1
        ok &= a["hits"] == b["hits"]
    return ok, n


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(Path(sys.argv[2]), Path(sys.argv[3]), json.loads(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--home", type=Path, required=True, help="the index (read only)")
    ap.add_argument("--root", type=Path, required=True, help="its knowledge base (copied)")
    ap.add_argument("--other", required=True, help="Python of the baseline checkout's environment")
    ap.add_argument("--n", type=int, default=60, help="timed questions per case and side")
    ap.add_argument("--repo", default="flashinfer")
    ap.add_argument("--tag", default="languages=cuda-cpp")
    ap.add_argument("--check", action="store_true", help="compare the answers too")
    ap.add_argument("--out", default="ab-latency", help="result name under bench/results")
    args = ap.parse_args()

    spec = cases(args.repo, args.tag)
    tmp = Path(tempfile.mkdtemp(prefix="kbase-ab-"))
    sides = {}
    try:
        for name, python in (("A", args.other), ("B", sys.executable)):
            root = tmp / name
            shutil.copytree(args.root, root, ignore=shutil.ignore_patterns(".kbase"))
            sides[name] = Side(python, root, args.home, spec)
        for q in ("warm up one", "warm up two", "warm up three"):
            for case in spec:
                for s in sides.values():
                    s.ask({"q": q, "case": case})
        pool = question_pool()[::-1]
        wall: dict = {s: {c: [] for c in spec} for s in sides}
        cpu: dict = {s: {c: [] for c in spec} for s in sides}
        diffs, compared, chroma_differs = [], 0, 0
        load = [os.getloadavg()[0]]
        for i in range(args.n):
            for j, case in enumerate(spec):
                k = j * args.n + i  # every question unseen by both sides
                q = pool[k % len(pool)] + (f" (run {k // len(pool)})" if k >= len(pool) else "")
                order = ("A", "B") if (i + j) % 2 == 0 else ("B", "A")
                got = {s: sides[s].ask({"q": q, "case": case, "check": args.check}) for s in order}
                for s in sides:
                    wall[s][case].append(got[s]["wall"])
                    cpu[s][case].append(got[s]["cpu"])
                if args.check and case != "embedding alone":
                    ok, n = same(got["A"], got["B"])
                    compared += n
                    chroma_differs += n < 2
                    if not ok:
                        diffs.append({"case": case, "q": q, "A": got["A"], "B": got["B"]})
            if i % 10 == 9:
                load.append(os.getloadavg()[0])
    finally:
        for s in sides.values():
            s.close()
        shutil.rmtree(tmp, ignore_errors=True)

    res: dict = {"home": str(args.home), "n": args.n, "load_1m": load, "code": {}, "cases": {}}
    res["code"] = {s: sides[s].code for s in sides}
    print(f"A: {res['code']['A']}\nB: {res['code']['B']}")
    head = ("case", "A p50", "B p50", "B/A", "A p95", "B p95", "A cpu", "B cpu")
    print(f"{head[0]:28s}" + "".join(f"{h:>8s}" for h in head[1:]))
    for case in spec:
        r = {
            s: {
                "p50_ms": round(1000 * percentile(wall[s][case], 50), 2),
                "p95_ms": round(1000 * percentile(wall[s][case], 95), 2),
                "mean_ms": round(1000 * statistics.fmean(wall[s][case]), 2),
                "p50_process_cpu_ms": round(1000 * percentile(cpu[s][case], 50), 2),
            }
            for s in sides
        }
        r["B/A_p50"] = round(r["B"]["p50_ms"] / r["A"]["p50_ms"], 3)
        res["cases"][case] = r
        cells = (r["A"]["p50_ms"], r["B"]["p50_ms"], r["B/A_p50"], r["A"]["p95_ms"])
        cells += (r["B"]["p95_ms"], r["A"]["p50_process_cpu_ms"], r["B"]["p50_process_cpu_ms"])
        print(f"{case:28s}" + "".join(f"{x:8.2f}" for x in cells))
    for s in sides:
        e, u = (res["cases"][c][s]["p50_ms"] for c in ("embedding alone", "unfiltered"))
        filtered = [round(res["cases"][c][s]["p50_ms"] / u, 2) for c in list(spec)[2:]]
        res[f"{s}_ratios"] = {
            "unfiltered/embedding": round(u / e, 2),
            "filtered/unfiltered": filtered,
        }
        print(f"{s}: unfiltered/embedding {u / e:.2f}, filtered/unfiltered {filtered}")
    print(f"load average (1 min) during the run: {load}")
    if args.check:
        res.update(compared=compared, chroma_differs=chroma_differs, differ=len(diffs))
        res["diffs"] = diffs[:20]
        print(
            f"compared {compared} answers (hits, and ranked candidates, where both sides got the "
            f"same rows from Chroma): {len(diffs)} differ; Chroma's rows differed in "
            f"{chroma_differs} searches"
        )
    out = write_result(args.out, res)
    print(f"wrote {out}", file=sys.stderr)  # --out may name a file outside the checkout


if __name__ == "__main__":
    main()
