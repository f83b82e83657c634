"""The prior art's method, kept as a baseline: score = occurrences of the query's words
in the entry's text, no IDF, no vectors."""

from __future__ import annotations

import re

from kbase.schema import Entry


def _words(query: str) -> list[str]:
    return [w for w in re.findall(r"\w+", query.lower()) if len(w) > 1]


def entry_text(entry: Entry) -> str:
    return (entry.title + "\n" + "\n".join(c.text for c in entry.chunks)).lower()


def keyword_count_search(
    entries: list[Entry], query: str, k: int = 5, texts: list[str] | None = None
) -> list[tuple[str, float]]:
    texts = texts if texts is not None else [entry_text(e) for e in entries]
    words = _words(query)
    scored = []
    for e, t in zip(entries, texts, strict=False):
        s = sum(t.count(w) for w in words)
        if s:
            scored.append((e.id, float(s)))
    scored.sort(key=lambda x: -x[1])
    return scored[:k]
