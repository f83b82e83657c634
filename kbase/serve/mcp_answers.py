"""What the MCP tools answer, and the budget (docs/agents.md): search and get answer the compact
models here, history, list and stale kbase.schema's pages. Agent context is the scarce resource,
so every answer's JSON stays within the call's `max_chars`; what a cut leaves out is said in
`truncated` (lists get a `next_cursor`, an entry's text is cut, never emptied)."""

from __future__ import annotations

import json
from itertools import accumulate
from typing import Any, Literal

from pydantic import BaseModel, Field

from kbase.schema import SearchCandidate, Truncation, Verified

MIN_TEXT_CHARS = 80  # an entry answer always carries at least this much of the text


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str)


class More(BaseModel):
    tool: Literal["get"] = "get"
    id: str
    section: str | None = None


class CompactHit(Verified):
    section: str = Field(description="the section the snippet comes from")
    snippet: str
    where: str = Field(description="path:line in the knowledge base")
    more: More = Field(description="the get call that reads the rest")
    confidence: float | None = Field(None, description="estimated probability that it fits")


class SearchAnswer(BaseModel):
    query: str
    env: str | dict[str, str] | None = Field(None, description="environment statuses are for")
    no_good_match: bool = Field(
        False, description="true: even the best hit is unlikely to fit; the kb may not cover this"
    )
    hits: list[CompactHit]
    candidates: list[SearchCandidate] = Field(
        default_factory=list,
        description="the top 13 entries, one line each (use_when, matched trigger): pick one",
    )
    note: str | None = Field(None, description="why there are no hits, and what to try")
    truncated: Truncation | None = None


class EntryAnswer(Verified):
    path: str | None = Field(
        None, description="file in the knowledge base (dropped first on a tight budget)"
    )
    tags: list[str] = Field(default_factory=list)
    sections: list[str] = Field(default_factory=list, description="section titles get accepts")
    text: str = Field(description="the entry (or the asked section); never empty")
    feedback: dict[str, Any] | None = Field(None, description="what users said after acting on it")
    truncated: Truncation | None = None


def _cut(s: str, width: int | None) -> str:
    if width is None or len(s) <= width:
        return s
    return s[:width].rstrip() + "…"


def fit_search(answer: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """Shorten snippets first, then the candidate lines, then drop the lowest hits, then the
    last candidate lines."""
    hits = answer["hits"]
    out = dict(answer)
    if len(out["query"]) > 120:
        out["query"] = out["query"][:120] + "…"
    cands = out.get("candidates") or []
    for width in (None, 160, 80):
        out["hits"] = [dict(h, snippet=_cut(h["snippet"], width)) for h in hits]
        if len(dumps(out)) <= max_chars:
            return out
    for width in (100, 60):  # candidate lines next: the caller still sees every id
        out["candidates"] = [
            dict(
                c, use_when=_cut(c["use_when"], width), trigger=_cut(c.get("trigger") or "", width)
            )
            for c in cands
        ]
        if len(dumps(out)) <= max_chars:
            return out
    out = fit_items(out, "hits", max_chars)  # the lowest hits go, then the candidate lines
    while len(dumps(out)) > max_chars and out["candidates"]:
        out["candidates"] = out["candidates"][:-1]
    return out


def fit_entry(doc: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """The text cut at the budget, never to nothing: tags and the section list go first."""
    text = doc.get("text") or ""
    out = dict(doc)
    if len(dumps(out)) <= max_chars:
        return out
    last = ("verified_on", "verified_at", "repo")
    for drop in accumulate([(), ("tags",), ("sections",), ("feedback", "path"), last]):  # more each
        head = {k: v for k, v in out.items() if k not in drop}
        head["text"] = ""
        head["truncated"] = {
            "shown_chars": len(text),
            "total_chars": len(text),
            "hint": "ask for a section or raise max_chars",
        }
        room = max_chars - len(dumps(head))
        if room >= MIN_TEXT_CHARS:
            break
    if room < MIN_TEXT_CHARS:  # a tiny budget: shorten the envelope, never the text to nothing
        head["truncated"]["hint"] = "raise max_chars"  # the short form
        room = max_chars - len(dumps(head))
    if room < MIN_TEXT_CHARS and head.get("title"):
        title = head["title"]
        head["title"] = title[: max(16, len(title) - (MIN_TEXT_CHARS - room) - 1)].rstrip() + "…"
        room = max_chars - len(dumps(head))
    room -= len(dumps("…")) - 2  # the ellipsis appended below
    cut = text[: max(room, MIN_TEXT_CHARS)]
    while len(cut) > MIN_TEXT_CHARS and len(dumps(cut)) - 2 > room:
        cut = cut[: max(MIN_TEXT_CHARS, int(len(cut) * 0.9))]
    head["text"] = cut.rstrip() + "…"
    head["truncated"]["shown_chars"] = len(cut)
    return head


def fit_items(answer: dict[str, Any], key: str, max_chars: int, offset: int = 0) -> dict[str, Any]:
    """Drop items from the end until the JSON fits; with paging, next_cursor resumes at the cut."""
    items = list(answer.get(key) or [])
    paged = "next_cursor" in answer
    out = dict(answer)
    n = len(items)
    while True:
        out[key] = items[:n]
        if n < len(items):
            out["truncated"] = {
                "omitted": len(items) - n,
                "hint": "follow next_cursor" if paged else "raise max_chars",
            }
            if paged:
                out["next_cursor"] = str(offset + n)
        if len(dumps(out)) <= max_chars or n == 0:
            return out
        n = max(0, min(n - 1, int(n * max_chars / len(dumps(out)))))
