#!/usr/bin/env python3
"""Search latency on the dev-set knowledge base (skills + four mined archives, ~5k entries):
warm p50/p95 per filter with every query text unseen (the query-embedding cache never answers),
the query embedding alone, cold `kbase search`, and re-indexing after one edit.

    python bench/bench_latency.py [--work /tmp/kbase-devsets] [--n 100] [--scale 100000]

--scale N also builds an N-entry index by repeating the mined cards under new ids, reusing their
vectors (no re-embedding), and measures warm latency there. Writes bench/results/latency.json.
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
from common import question_pool, summary_ms, write_result  # noqa: E402
from devset_kb import build_kb  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402


def timed(fn, queries: list[str]) -> list[float]:
    out = []
    for q in queries:
        t = time.perf_counter()
        fn(q)
        out.append(time.perf_counter() - t)
    return out


def warm_latency(kb, pool: list[str], n: int, repo: str, tag: str) -> dict:
    emb = kb.query_embedder()
    cases = {
        "embedding alone": lambda q: emb.embed_query(q),
        "unfiltered": lambda q: kb.search(q, k=5),
        f"kind=pr repo={repo}": lambda q: kb.search(q, k=5, kind="pr", repo=repo),
        "kind=skill": lambda q: kb.search(q, k=5, kind="skill"),
        f"tag {tag}": lambda q: kb.search(q, k=5, tags=[tag]),
    }
    kb.warm_up()
    for q in ("warm up one", "warm up two"):
        for fn in cases.values():
            fn(q)
    need = n * len(cases)
    texts = [f"{q} #{i // len(pool)}" if i >= len(pool) else q for i, q in enumerate(pool * 9)]
    if len(texts) < need:
        raise SystemExit(f"only {len(texts)} distinct questions for {need} timed searches")
    # Interleaved, one query of each case in turn, so load on a shared machine hits every case
    # alike; each case still gets texts no other case (and no earlier run) has embedded.
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for i in range(n):
        for j, (name, fn) in enumerate(cases.items()):
            samples[name] += timed(fn, [texts[j * n + i]])
    res = {name: summary_ms(s) for name, s in samples.items()}
    base = res["unfiltered"]["p50_ms"]
    for r in res.values():
        r["vs_unfiltered_p50"] = round(r["p50_ms"] / base, 2) if base else None
    return res


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
    kb.embedder()  # model load excluded
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


def scaled_index(kb, target: int, work: Path) -> tuple[object, float]:
    """An index of `target` entries: the mined cards repeated under new ids, vectors copied."""
    import hashlib

    from kbase.retrieval import generations as G
    from kbase.retrieval.indexer import _metadata, dense_chunks
    from kbase.retrieval.lexical import build_bm25
    from kbase.retrieval.vectors import VectorStore, partition_key

    from kbase.api import KnowledgeBase

    idx = kb.searcher().index()
    src = kb.vector_store()
    base = [e for e in idx.entries if e.kind == "pr"]
    vec_of: dict[str, list[float]] = {}
    for key in idx.partitions:
        col = src._col(key, create=False)
        ids = [c.id for e in base if partition_key(e.kind, e.repo) == key for c in dense_chunks(e)]
        for i in range(0, len(ids), 1000):
            got = col.get(ids=ids[i : i + 1000], include=["embeddings"])
            vec_of.update(zip(got["ids"], got["embeddings"], strict=True))
    src.close()
    home = work / f"scale-{target}"
    out_entries = list(idx.entries)
    store = VectorStore(home)
    t = time.perf_counter()
    copy = 0
    while len(out_entries) < target:
        copy += 1
        batch = {}
        for e in base:
            if len(out_entries) >= target:
                break
            ne = e.model_copy(deep=True)
            ne.id = f"{e.id}~{copy}"
            ne.content_hash = hashlib.sha256(f"{e.content_hash}{copy}".encode()).hexdigest()
            for c in ne.chunks:
                old = c.id
                c.entry_id = ne.id
                c.id = f"{ne.id}::{old.split('::', 1)[1]}"
                if old in vec_of:
                    batch.setdefault(partition_key(ne.kind, ne.repo), []).append(
                        (c.id, vec_of[old], {**_metadata(ne), "section": c.section})
                    )
            out_entries.append(ne)
        for key, rows in batch.items():
            store.upsert(key, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    for e in idx.entries:  # the originals' vectors too
        rows = [(c.id, vec_of[c.id]) for c in dense_chunks(e) if c.id in vec_of]
        if rows:
            store.upsert(
                partition_key(e.kind, e.repo),
                [r[0] for r in rows],
                [r[1] for r in rows],
                [{**_metadata(e), "section": "x"} for _ in rows],
            )
    skills = [e for e in idx.entries if e.kind == "skill"]
    if skills:
        kb_store = kb.vector_store()
        col = kb_store._col("skill", create=False)
        ids = [c.id for e in skills for c in e.chunks]
        got = col.get(ids=ids, include=["embeddings", "metadatas"])
        store.upsert("skill", got["ids"], got["embeddings"], got["metadatas"])
        kb_store.close()
    store.close()
    gid, tmp = G.new_generation_dir(home)
    build_bm25(
        [c for e in out_entries for c in e.chunks],
        [e.title for e in out_entries for _ in e.chunks],
        tmp / "bm25",
    )
    G.write_entries(tmp, out_entries, {"root": str(kb.root), "entries": len(out_entries)})
    G.publish(home, gid, tmp)
    built = time.perf_counter() - t
    big = KnowledgeBase(root=kb.root, home=home)
    return big, built


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--n", type=int, default=100, help="timed searches per case")
    ap.add_argument("--repo", default="flashinfer")
    ap.add_argument("--tag", default="languages=cuda-cpp")
    ap.add_argument(
        "--scale", type=int, default=0, help="also measure an index of this many entries"
    )
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
    if args.scale:
        big, built = scaled_index(kb, args.scale, work)
        res["scaled"] = {
            "entries": len(big.searcher().index().entries),
            "build_s": round(built, 1),
            "warm": warm_latency(big, pool[::-1], args.n, args.repo, args.tag),
        }
    console = Console(width=140)
    for label, block, n_entries in (
        ("warm latency", res["warm"], entries),
        (
            "warm latency (scaled)",
            res.get("scaled", {}).get("warm"),
            res.get("scaled", {}).get("entries"),
        ),
    ):
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
