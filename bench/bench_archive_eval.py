#!/usr/bin/env python3
"""Retrieval quality over the mined PR archives: hybrid vs BM25-only vs dense-only vs keyword count.

Replays the shared histories (../shared), mines them with the shipped recipes, indexes the
cards with `KnowledgeBase`, then asks a dev set of questions generated from templates over
the mined cards (fixed seed; English and Chinese). Expected answers are computed from the
card facts at run time, so no history content is stored in the repository.

    python3 bench/bench_archive_eval.py [--limit N] [--per-template 4] [--seed 7] [--keep DIR]

Writes bench/results/bench_archive_eval.json (with every query and its ranks) and prints Hit@5
and MRR@10.
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import work_dir, write_result  # noqa: E402
from devset_kb import mine_archives  # noqa: E402

HISTORIES = ("lmdeploy", "flashinfer")
K_HIT, K_MRR = 5, 10
STOP = {
    "the",
    "and",
    "for",
    "with",
    "from",
    "into",
    "when",
    "that",
    "this",
    "add",
    "fix",
    "support",
    "update",
    "use",
    "using",
    "of",
    "to",
    "in",
    "on",
    "a",
    "an",
    "by",
    "is",
    "be",
    "feat",
    "misc",
    "bugfix",
    "refactor",
}

# (template id, language, text). {symbol} {family} {repo} {path} {title} {words} {category}
TEMPLATES = {
    "symbol": [
        ("en", "which PR changed {symbol} in {family}"),
        ("en", "{repo} PR that touched {symbol}"),
        ("zh", "哪个 PR 修改了 {family} 的 {symbol}"),
        ("zh", "{repo} 中改动 {symbol} 的 PR"),
    ],
    "revert": [("en", 'which PR reverted "{title}"'), ("zh", "哪个 PR 回滚了 {title}")],
    "title": [("en", "{repo} PR about {words}"), ("zh", "关于 {words} 的 PR")],
    "path": [("en", "PRs that changed {path}"), ("zh", "修改 {path} 的 PR")],
    "category": [
        ("en", "{category} PR in {family} touching {symbol}"),
        ("zh", "{family} 里涉及 {symbol} 的量化 PR"),
    ],
}


def replay_and_mine(work: Path, limit: int | None) -> Path:
    root = work / "kb"
    mine_archives(work, root, limit, names=HISTORIES)
    return root


def _words(title: str, n: int, rng: random.Random) -> str:
    toks = [
        t
        for t in re.findall(r"[A-Za-z][A-Za-z0-9_]+", title)
        if t.lower() not in STOP and len(t) > 2
    ]
    if len(toks) < 2:
        return ""
    keep = sorted(rng.sample(range(len(toks)), min(n, len(toks))))
    return " ".join(toks[i] for i in keep)


def make_queries(root: Path, per_template: int, seed: int) -> list[dict]:
    from common import load_card_entries
    from kbase.ingest.card_format import split_card

    from kbase.schema import PRCard

    rng = random.Random(seed)

    def some(pool: list) -> list:
        """At most per_template items of the pool, drawn at random."""
        return rng.sample(pool, min(per_template, len(pool)))

    entries, _ = load_card_entries(root)
    cards = {}
    for e in entries:
        cards[e.id] = PRCard.model_validate(
            split_card((root / e.path).read_text(encoding="utf-8")).meta
        )
    sym_cards: dict[tuple[str, str], set[str]] = defaultdict(set)
    path_cards: dict[tuple[str, str], set[str]] = defaultdict(set)
    for eid, c in cards.items():
        for f in c.files:
            path_cards[(c.repo, f.path)].add(eid)
            for s in f.symbols:
                if len(s) >= 8:  # short names (run, main) are everywhere
                    sym_cards[(c.repo, s)].add(eid)
    ids = sorted(cards)
    queries: list[dict] = []

    def add(tid: str, lang: str, text: str, expected: set[str]) -> None:
        queries.append({"template": tid, "lang": lang, "query": text, "expected": sorted(expected)})

    # symbol questions: symbols that at most two PRs touched, in a family
    sym_pool = [
        (eid, s)
        for eid in ids
        if cards[eid].families
        for f in cards[eid].files
        for s in f.symbols
        if 1 <= len(sym_cards.get((cards[eid].repo, s), ())) <= 2
    ]

    def by_symbol(kind: str, pool: list, fields, keep=lambda e: True) -> None:
        """Questions of a kind naming a symbol (and its card's family): the cards that touched
        the symbol in that repository (those `keep` accepts) answer them."""
        for lang, tpl in TEMPLATES[kind]:
            for eid, s in some(pool):
                c = cards[eid]
                want = {e for e in sym_cards[(c.repo, s)] if keep(e)}
                add(kind, lang, tpl.format(**fields(c, s)), want)

    by_symbol(
        "symbol", sym_pool, lambda c, s: dict(symbol=s, family=rng.choice(c.families), repo=c.repo)
    )
    # reverts whose reverted PR has a card
    reverts = [
        eid
        for eid in ids
        if cards[eid].reverts is not None and f"pr:{cards[eid].repo}#{cards[eid].reverts}" in cards
    ]
    for lang, tpl in TEMPLATES["revert"]:
        for eid in some(reverts):
            c = cards[eid]
            target = cards[f"pr:{c.repo}#{c.reverts}"]
            add(
                "revert",
                lang,
                tpl.format(title=target.title),
                {e for e in ids if cards[e].repo == c.repo and cards[e].reverts == c.reverts},
            )
    # a few words of a title (a half-remembered PR)
    for lang, tpl in TEMPLATES["title"]:
        picked = 0
        for eid in rng.sample(ids, len(ids)):
            words = _words(cards[eid].title, 4, rng)
            if not words:
                continue
            same = {
                e for e in ids if all(w.lower() in cards[e].title.lower() for w in words.split())
            }
            if len(same) > 2:
                continue
            add("title", lang, tpl.format(repo=cards[eid].repo, words=words), same)
            picked += 1
            if picked == per_template:
                break
    # paths touched by one or two PRs
    path_pool = sorted(k for k, v in path_cards.items() if 1 <= len(v) <= 2 and "/" in k[1])
    for lang, tpl in TEMPLATES["path"]:
        for key in some(path_pool):
            add("path", lang, tpl.format(path=key[1]), path_cards[key])
    # quantization PRs in a family, named by a symbol they touched
    quant = [(eid, s) for eid, s in sym_pool if "quantization" in cards[eid].categories]
    by_symbol(
        "category",
        quant,
        lambda c, s: dict(category="quantization", family=rng.choice(c.families), symbol=s),
        lambda e: "quantization" in cards[e].categories,
    )
    return queries


def score(ranked: list[str], expected: list[str]) -> tuple[int, float]:
    want = set(expected)
    for i, eid in enumerate(ranked[:K_MRR]):
        if eid in want:
            return int(i < K_HIT), 1.0 / (i + 1)
    return 0, 0.0


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--limit", type=int, default=None, help="replay only the first N commits of each history"
    )
    ap.add_argument("--per-template", type=int, default=4)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="work folder to keep (replays and archives are reused)",
    )
    args = ap.parse_args()

    from common import load_card_entries
    from eval_baseline import entry_text, keyword_count_search
    from rich.console import Console
    from rich.table import Table

    from kbase.api import KnowledgeBase

    err = Console(stderr=True)
    work = work_dir(args.keep, "kbase-bench-archive-")
    try:
        with err.status("replaying and mining the histories ..."):
            root = replay_and_mine(work, args.limit)
        queries = make_queries(root, args.per_template, args.seed)
        kb = KnowledgeBase(root=root, home=work / "home")
        t0 = time.perf_counter()
        with err.status(f"indexing {root} ..."):
            kb.index()
        index_s = time.perf_counter() - t0
        entries, _ = load_card_entries(root)
        texts = [entry_text(e) for e in entries]
        methods = {
            "hybrid": lambda q: [h.id for h in kb.search(q, k=K_MRR, kind="pr", mode="hybrid")],
            "bm25": lambda q: [h.id for h in kb.search(q, k=K_MRR, kind="pr", mode="bm25")],
            "dense": lambda q: [h.id for h in kb.search(q, k=K_MRR, kind="pr", mode="dense")],
            "keyword-count": lambda q: [
                i for i, _ in keyword_count_search(entries, q, k=K_MRR, texts=texts)
            ],
        }
        per_method: dict[str, dict] = {}
        for name, fn in methods.items():
            hits, rr, by_lang = [], [], defaultdict(list)
            for q in queries:
                ranked = fn(q["query"])
                h, r = score(ranked, q["expected"])
                hits.append(h)
                rr.append(r)
                by_lang[q["lang"]].append(h)
                q.setdefault("ranks", {})[name] = next(
                    (i + 1 for i, e in enumerate(ranked) if e in set(q["expected"])), None
                )
            per_method[name] = {
                "hit@5": round(sum(hits) / len(hits), 3),
                "mrr@10": round(sum(rr) / len(rr), 3),
                **{
                    f"hit@5_{lang}": round(sum(v) / len(v), 3)
                    for lang, v in sorted(by_lang.items())
                },
            }
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)

    table = Table(
        title=f"PR archive retrieval: {len(queries)} queries, {len(entries)} cards",
        title_justify="left",
    )
    for col in ("method", "Hit@5", "MRR@10", "Hit@5 en", "Hit@5 zh"):
        table.add_column(col, justify="right" if col != "method" else "left")
    for name, m in per_method.items():
        table.add_row(
            name,
            f"{m['hit@5']:.3f}",
            f"{m['mrr@10']:.3f}",
            f"{m.get('hit@5_en', 0):.3f}",
            f"{m.get('hit@5_zh', 0):.3f}",
        )
    Console(width=160).print(table)
    counts = defaultdict(int)
    for q in queries:
        counts[f"{q['template']}/{q['lang']}"] += 1
    out = write_result(
        "bench_archive_eval",
        {
            "limit": args.limit,
            "seed": args.seed,
            "cards": len(entries),
            "index_s": round(index_s, 1),
            "queries_by_template": dict(counts),
            "methods": per_method,
            "queries": queries,
        },
    )
    err.print(f"wrote {out.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
