"""What a question asks for, beyond its words: a date range, an intent, and the texts each
retriever should see (issue #11: dates, "first"/"broke" intents, abbreviations, compound names).

Dates become a soft prior (a fusion feature), not a hard filter: "fixed in early 2024" is often
off by a month, and skills have no date at all.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass, field

from kbase.retrieval.api_aliases import concepts_for
from kbase.retrieval.distill import distill
from kbase.retrieval.glossary import expand
from kbase.retrieval.tokenize import base_tokens, group_forms, matched_groups, matched_spans

_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_MONTHS.update({m.lower(): i for i, m in enumerate(calendar.month_abbr) if m})
_MONTHS["sept"] = 9
_MONTH_RX = "|".join(sorted(_MONTHS, key=len, reverse=True))
_YEAR = r"(20[12]\d)"
_PART = {"early": (1, 4), "mid": (5, 8), "late": (9, 12), "end of": (10, 12)}
_Q = {"q1": (1, 3), "q2": (4, 6), "q3": (7, 9), "q4": (10, 12)}

_DATE_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"\b{_YEAR}-(\d{{2}})-(\d{{2}})\b"), "day"),
    (re.compile(rf"\b{_YEAR}-(\d{{2}})\b"), "ym"),
    (re.compile(rf"{_YEAR}\s*年\s*(\d{{1,2}})\s*月"), "ym"),
    (re.compile(rf"\b({_MONTH_RX})\.?\s+{_YEAR}\b", re.I), "month-year"),
    (re.compile(rf"\b(q[1-4])\s+{_YEAR}\b", re.I), "quarter"),
    (re.compile(rf"\b(early|mid|late|end of)[\s-]+{_YEAR}\b", re.I), "part"),
    (re.compile(rf"\b(since|after|before|until|prior to)\s+{_YEAR}\b", re.I), "open"),
    (re.compile(rf"{_YEAR}\s*年(以前|之前|以后|之后)?"), "zh-year"),
    (re.compile(rf"\b{_YEAR}\b"), "year"),
]

FIRST_WORDS = re.compile(
    r"\b(first|initial(ly)?|introduc\w*|original|earliest|start(ed)? (using|supporting)|"
    r"bring-?up|when (was|did)\b.*\b(add|added|land|landed|support|supported|introduced))\b"
    r"|最早|第一次|首次|引入|什么时候加|何时加入",
    re.I,
)
FIX_WORDS = re.compile(
    r"\b(broke|broken|breaks|regress\w*|crash\w*|hang\w*|wrong|bug\w*|fix\w*|fail\w*|nan|"
    r"error|illegal|segfault|deadlock)\b|回退|回滚|崩溃|修复|错误|死循环",
    re.I,
)
REVERT_WORDS = re.compile(r"\b(revert\w*|roll(ed)? ?back|backed out)\b|回滚|撤销", re.I)
_CAMEL_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


@dataclass
class QueryPlan:
    query: str
    text: str  # the query without its date expression
    lexical: str  # for BM25: text + glossary (Chinese → English) terms
    dense: str  # for the embedding model: translated, abbreviations spelled out, camel case split
    since: str | None = None
    until: str | None = None
    intent_first: bool = False
    intent_fix: bool = False
    intent_revert: bool = False
    groups: list[int] = field(default_factory=list)


def _month_end(y: int, m: int) -> str:
    return f"{y:04d}-{m:02d}-{calendar.monthrange(y, m)[1]:02d}"


def parse_dates(query: str) -> tuple[str, str | None, str | None]:
    """(query without the first date expression, since, until); dates inclusive, YYYY-MM-DD."""
    for rx, kind in _DATE_PATTERNS:
        m = rx.search(query)
        if not m:
            continue
        g = m.groups()
        since = until = None
        if kind == "day":
            since = until = f"{g[0]}-{g[1]}-{g[2]}"
        elif kind == "ym":
            y, mo = int(g[0]), int(g[1])
            if not 1 <= mo <= 12:
                continue
            since, until = f"{y:04d}-{mo:02d}-01", _month_end(y, mo)
        elif kind == "month-year":
            y, mo = int(g[1]), _MONTHS[g[0].lower()]
            since, until = f"{y:04d}-{mo:02d}-01", _month_end(y, mo)
        elif kind in ("quarter", "part"):
            a, b = (_Q if kind == "quarter" else _PART)[g[0].lower()]
            y = int(g[1])
            since, until = f"{y:04d}-{a:02d}-01", _month_end(y, b)
        elif kind == "open":
            y = int(g[1])
            if g[0].lower() in ("since", "after"):
                since = f"{y:04d}-01-01" if g[0].lower() == "since" else f"{y + 1:04d}-01-01"
            else:
                until = f"{y - 1:04d}-12-31"
        elif kind == "zh-year":
            y = int(g[0])
            if g[1] in ("以前", "之前"):
                until = f"{y - 1:04d}-12-31"
            elif g[1] in ("以后", "之后"):
                since = f"{y:04d}-01-01"
            else:
                since, until = f"{y:04d}-01-01", f"{y:04d}-12-31"
        else:  # a bare year
            since, until = f"{g[0]}-01-01", f"{g[0]}-12-31"
        rest = (query[: m.start()] + " " + query[m.end() :]).strip()
        rest = re.sub(r"\b(in|during|from|of)\s*$", "", rest).strip() or query
        return re.sub(r"\s+", " ", rest), since, until
    return query, None, None


def _split_camel(text: str) -> str:
    """BatchPrefillWithPagedKVCache → Batch Prefill With Paged KV Cache, for the embedding model."""

    def one(m: re.Match[str]) -> str:
        w = m.group(0)
        parts = _CAMEL_PART.findall(w)
        return " ".join(parts) if len(parts) > 2 else w

    return re.sub(r"\b[A-Za-z][a-z0-9]*[A-Z][A-Za-z0-9]*\b", one, text)


_PLAIN_WORDS = frozenset({"fix", "bug", "hang", "hangs", "stuck", "faster", "perf", "bench", "ci"})


def _is_abbreviation(token: str, text: str) -> bool:
    """Typed in capitals (EPLB), mixing letters and digits (fa3, sm90), or a short lowercase
    acronym (mla): the embedding model needs the long form next to it."""
    if token in _PLAIN_WORDS or not token.isascii() or "." in token or "_" in token:
        return False
    m = re.search(rf"(?<![A-Za-z0-9]){re.escape(token)}(?![A-Za-z0-9])", text, re.I)
    surface = m.group(0) if m else token
    return surface.isupper() or any(c.isdigit() for c in surface) or len(surface) <= 4


def plan(query: str) -> QueryPlan:
    # A pasted traceback or log: its error lines and names only (retrieval/distill.py).
    text, since, until = parse_dates(distill(query))
    api = concepts_for(text)  # API names -> the concepts they stand for (api_aliases.yaml)
    exp = expand(text)
    base = base_tokens(exp.lexical)
    groups = matched_groups(base)
    dense = _split_camel(exp.dense)
    # Spell out abbreviations for the embedding model, which has never seen "EPLB" or "MTP".
    low = dense.lower()
    extra = []
    for g, start, length in matched_spans(base):
        canonical = group_forms(g)[0]
        if length == 1 and _is_abbreviation(base[start], text) and canonical.lower() not in low:
            if canonical not in extra:
                extra.append(canonical)
    if extra:
        dense = f"{dense} ({'; '.join(extra)})"
    if api:
        dense = f"{dense} ({'; '.join(api)})"
    return QueryPlan(
        query=query,
        text=text,
        lexical=f"{exp.lexical} {' '.join(api)}" if api else exp.lexical,
        dense=dense,
        since=since,
        until=until,
        intent_first=bool(FIRST_WORDS.search(query)),
        intent_fix=bool(FIX_WORDS.search(query)),
        intent_revert=bool(REVERT_WORDS.search(query)),
        groups=groups,
    )
