"""Retrieval quality on a labelled query set: Hit@1, Hit@5 and MRR per method."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

METHODS = ("hybrid", "bm25", "dense", "keyword-count")


@dataclass
class EvalQuery:
    query: str
    expected: list[str]
    lang: str = "en"
    type: str = "concept"
    source: str = ""


@dataclass
class Scores:
    hit1: float
    hit5: float
    mrr: float
    n: int
    misses: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "hit@1": round(self.hit1, 4),
            "hit@5": round(self.hit5, 4),
            "mrr": round(self.mrr, 4),
            "n": self.n,
        }


def load_queries(folder: Path, pattern: str = "*.yaml") -> list[EvalQuery]:
    out: list[EvalQuery] = []
    for f in sorted(folder.glob(pattern)):
        data = yaml.safe_load(f.read_text(encoding="utf-8")) or []
        if isinstance(data, dict):
            data = data.get("queries", [])
        for i, row in enumerate(data):
            exp = row["expected"]
            out.append(
                EvalQuery(
                    query=str(row["query"]),
                    expected=[exp] if isinstance(exp, str) else list(exp),
                    lang=row.get("lang", "en"),
                    type=row.get("type", "concept"),
                    source=f"{f.name}#{i}",
                )
            )
    return out


def score(ranked_ids: list[list[str]], queries: Sequence[Any]) -> Scores:
    """`queries`: anything with `.query` and `.expected` (EvalQuery, devsets.DevQuery)."""
    h1 = h5 = rr = 0.0
    misses = []
    for ids, q in zip(ranked_ids, queries, strict=False):
        rank = next((i for i, x in enumerate(ids) if x in q.expected), None)
        if rank is not None:
            h1 += rank == 0
            h5 += rank < 5
            rr += 1.0 / (rank + 1)
        if rank is None or rank >= 5:
            misses.append(q.query)
    n = max(len(queries), 1)
    return Scores(hit1=h1 / n, hit5=h5 / n, mrr=rr / n, n=len(queries), misses=misses)


def evaluate(
    kb, queries: list[EvalQuery], methods=METHODS, k: int = 10, kind: str | None = None
) -> dict[str, Scores]:
    from eval_baseline import entry_text, keyword_count_search

    idx = kb.searcher().index()
    entries = [e for e in idx.entries if kind is None or e.kind == kind]
    texts = [entry_text(e) for e in entries]
    out: dict[str, Scores] = {}
    for m in methods:
        ranked = []
        for q in queries:
            if m == "keyword-count":
                ranked.append([i for i, _ in keyword_count_search(entries, q.query, k, texts)])
            else:
                ranked.append(
                    [c.entry.id for c in kb.searcher().search(q.query, k=k, kind=kind, mode=m)][:k]
                )
        out[m] = score(ranked, queries)
    return out
