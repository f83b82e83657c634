"""Search benchmark: retrieval quality (dev set), warm query latency on ≥ 5,000 entries,
full build time, and the cost of re-indexing after editing one skill.

    python bench/bench_search.py            # everything; JSON in bench/results/search.json
    python bench/bench_search.py --quick    # fewer latency queries

PR-like entries are generated at run time from ../shared/data/histories (never stored).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, SHARED, summary_ms, write_result  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

console = Console(stderr=True)


def _chunk(eid: str, n: int, section: str, text: str, path: str):
    from kbase.schema import Chunk

    return Chunk(
        id=f"{eid}::{n}", entry_id=eid, kind="pr", section=section, text=text, line=1, path=path
    )


def history_entries(limit: int | None = None):
    """One PR-like entry per commit, plus one timeline entry per directory touched."""
    from kbase.schema import Entry

    out = []
    for hist in sorted((SHARED / "data" / "histories").glob("*.jsonl")):
        repo = hist.stem
        by_dir: dict[str, list[dict]] = defaultdict(list)
        for line in hist.read_text().splitlines()[:limit]:
            c = json.loads(line)
            eid = f"pr:{repo}#{c['pr']}" if c["pr"] else f"pr:{repo}@{c['sha'][:10]}"
            files = c["files"]
            symbols = sorted({s for f in files for s in f["symbols"]})[:40]
            summary = f"{c['subject']}\nrepo {repo}, {c['date'][:10]}, {len(files)} files"
            file_text = "\n".join(
                f"{f['path']} +{f['added']} -{f['deleted']} {' '.join(f['symbols'])}"
                for f in files[:60]
            )
            path = f"pr/{repo}/{c['sha']}.md"
            chunks = [
                _chunk(eid, 0, "summary", summary, path),
                _chunk(eid, 1, "files", file_text + "\n" + " ".join(symbols), path),
            ]
            h = hashlib.sha256(line.encode()).hexdigest()
            out.append(
                Entry(
                    id=eid,
                    kind="pr",
                    title=c["subject"],
                    path=f"pr/{repo}/{c['sha']}.md",
                    content_hash=h,
                    chunks=chunks,
                    tags=[f"repo={repo}"],
                    repo=repo,
                    pr=c["pr"],
                    date=c["date"],
                )
            )
            for f in files:
                by_dir[f["path"].rsplit("/", 1)[0] if "/" in f["path"] else "."].append(c)
        for d, commits in sorted(by_dir.items()):
            eid = f"pr:{repo}/dir:{d}"
            lines = [f"{c['date'][:10]} {c['subject']}" for c in commits[-40:]]
            text = f"history of {d} in {repo}: {len(commits)} commits\n" + "\n".join(lines)
            chunk = _chunk(eid, 0, "timeline", text, f"pr/{repo}/dirs/{d}.md")
            out.append(
                Entry(
                    id=eid,
                    kind="pr",
                    title=f"{repo}: {d} timeline",
                    path=chunk.path,
                    content_hash=hashlib.sha256(text.encode()).hexdigest(),
                    chunks=[chunk],
                    tags=[f"repo={repo}"],
                    repo=repo,
                )
            )
    seen, uniq = set(), []
    for e in out:
        if e.id not in seen:
            seen.add(e.id)
            uniq.append(e)
    return uniq


def quality(work: Path) -> dict:
    from eval_scores import METHODS, evaluate, load_queries

    from kbase.api import KnowledgeBase

    root = work / "skills-root"
    shutil.copytree(REPO / "skills", root / "skills")
    kb = KnowledgeBase(root=root, home=work / "skills-home")
    kb.index()
    queries = load_queries(REPO / "tests" / "eval", "skills_*.yaml")
    res = evaluate(kb, queries, kind="skill")
    table = Table(
        title=f"retrieval quality on the dev set ({len(queries)} queries, "
        f"{sum(q.lang == 'zh' for q in queries)} Chinese, "
        f"{sum(q.type == 'error' for q in queries)} error messages)"
    )
    for col in ("method", "Hit@1", "Hit@5", "MRR"):
        table.add_column(col)
    for m in METHODS:
        s = res[m]
        table.add_row(m, f"{s.hit1:.3f}", f"{s.hit5:.3f}", f"{s.mrr:.3f}")
    console.print(table)
    by_lang = {}
    for lang in ("en", "zh"):
        sub = [q for q in queries if q.lang == lang]
        if sub:
            by_lang[lang] = evaluate(kb, sub, methods=("hybrid",), kind="skill")["hybrid"].as_dict()
    misses = res["hybrid"].misses
    if misses:
        console.print(f"hybrid misses at 5: {misses}")
    return {
        "queries": len(queries),
        "methods": {m: res[m].as_dict() for m in METHODS},
        "hybrid_by_lang": by_lang,
        "hybrid_misses": misses,
    }


def latency(work: Path, n_queries: int) -> dict:
    from eval_baseline import keyword_count_search
    from eval_scores import load_queries
    from kbase.retrieval.indexer import build_index

    from kbase.api import KnowledgeBase

    root = work / "big-root"
    shutil.copytree(REPO / "skills", root / "skills")
    home = work / "big-home"
    extra = history_entries()
    kb = KnowledgeBase(root=root, home=home)
    t = time.perf_counter()
    kb.embedder()
    model_load = time.perf_counter() - t

    t = time.perf_counter()
    rep = build_index(root, home, kb.embedder, extra_entries=extra)
    build = time.perf_counter() - t
    console.print(f"full build: {rep.entries} entries / {rep.chunks} chunks in {build:.1f}s")

    # Re-index after editing one skill: only that skill may be re-embedded.
    victim = sorted((root / "skills").iterdir())[0]
    f = victim / "SKILL.md"
    f.write_text(f.read_text() + "\n<!-- edited by the benchmark -->\n")
    t = time.perf_counter()
    rep2 = build_index(root, home, kb.embedder, extra_entries=extra)
    reindex = time.perf_counter() - t
    t = time.perf_counter()
    rep3 = build_index(root, home, kb.embedder, extra_entries=extra)
    noop = time.perf_counter() - t

    queries = [q.query for q in load_queries(REPO / "tests" / "eval")]
    queries += [e.title for e in extra[:: max(1, len(extra) // 100)]]
    queries = (queries * (n_queries // max(1, len(queries)) + 1))[:n_queries]
    kb.warm_up()
    for q in queries[:20]:
        kb.search(q, k=5)
    samples = []
    for q in queries:
        t = time.perf_counter()
        kb.search(q, k=5)
        samples.append(time.perf_counter() - t)
    # side by side: the prior art scanning Markdown files on disk for each query
    md_dir = work / "md"
    idx = kb.searcher().index()
    md_dir.mkdir()
    for i, e in enumerate(idx.entries):
        (md_dir / f"{i}.md").write_text(e.title + "\n" + "\n".join(c.text for c in e.chunks))
    base = []
    for q in queries[:30]:
        t = time.perf_counter()
        texts = [p.read_text().lower() for p in md_dir.iterdir()]
        keyword_count_search(idx.entries, q, 5, texts)
        base.append(time.perf_counter() - t)
    return {
        "entries": rep.entries,
        "chunks": rep.chunks,
        "model_load_s": round(model_load, 2),
        "build_s": round(build, 2),
        "build_docs_per_s": round(rep.entries / build, 1),
        "build_chunks_per_s": round(rep.chunks / build, 1),
        "build_stages_s": rep.seconds,
        "reindex_one_skill_s": round(reindex, 3),
        "reindex_embedded": rep2.embedded_entries,
        "reindex_edited": victim.name,
        "reindex_stages_s": rep2.seconds,
        "noop_reindex_s": round(noop, 3),
        "noop_embedded": rep3.embedded_entries,
        "query": summary_ms(samples),
        "keyword_scan_baseline": summary_ms(base),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-latency", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kbase-bench-"))
    try:
        result = {"quality": quality(work)}
        if not args.skip_latency:
            lat = latency(work, 100 if args.quick else 400)
            result["latency"] = lat
            t = Table(title=f"index of {lat['entries']} entries ({lat['chunks']} chunks)")
            t.add_column("measure")
            t.add_column("value")
            t.add_row("model load", f"{lat['model_load_s']} s")
            t.add_row(
                "full build",
                f"{lat['build_s']} s ({lat['build_docs_per_s']} entries/s, "
                f"{lat['build_chunks_per_s']} chunks/s)",
            )
            t.add_row(
                "re-index after editing one skill",
                f"{lat['reindex_one_skill_s']} s, re-embedded {lat['reindex_embedded']}",
            )
            t.add_row(
                "no-op re-index", f"{lat['noop_reindex_s']} s, re-embedded {lat['noop_embedded']}"
            )
            t.add_row(
                "warm query p50 / p95", f"{lat['query']['p50_ms']} / {lat['query']['p95_ms']} ms"
            )
            t.add_row(
                "keyword scan of Markdown p50 / p95",
                f"{lat['keyword_scan_baseline']['p50_ms']} / "
                f"{lat['keyword_scan_baseline']['p95_ms']} ms",
            )
            console.print(t)
        out = write_result("search", result)
        console.print(f"wrote {out}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
