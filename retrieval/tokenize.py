"""Lexical tokens for BM25 that respect code identifiers and Chinese text: `tl.dot`, `num_warps`,
`__shfl_down_sync` and `sm_90a` are kept whole *and* split into their parts, so a query for either
form matches. Runs of CJK characters become unigrams and bigrams: Chinese has no spaces, and
bigrams are the usual cheap stand-in for a word segmenter."""

from __future__ import annotations

import functools
import re

from kbase.data import read_yaml

_TOKEN = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"  # identifiers, dotted paths
    r"|\d+(?:\.\d+)?[A-Za-z]*"  # numbers with unit suffixes: 2**31 → 2, 31; 16kb; 90a
    r"|[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+"  # CJK runs
)
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")

STOPWORDS = frozenset(
    """a an and are as at be but by can do does for from has have how i if in into is it its
    of on or so than that the their then there these this to was we what when where which
    while why will with you your my me not no yes should would could""".split()
)


def read_data(name: str) -> dict:
    """kbase/data/<name>; {} when absent."""
    try:
        return read_yaml(name) or {}
    except FileNotFoundError:
        return {}


def _stem(word: str) -> str:
    # Plural folding only: aggressive stemming mangles identifiers like `kwargs` or `cls`.
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def tokens(text: str) -> list[str]:
    """Base tokens plus one concept token per abbreviation group found (see concepts())."""
    base = base_tokens(text)
    return base + concepts(base)


def base_tokens(text: str) -> list[str]:
    out: list[str] = []
    for tok in _TOKEN.findall(text):
        out.extend(_token_parts(tok))
    return out


@functools.lru_cache(maxsize=1 << 18)
def _token_parts(tok: str) -> tuple[str, ...]:
    """The base tokens of one regex match. Cached: a corpus repeats a small vocabulary, and this
    per-token work was most of an index build's BM25 time (issue #11)."""
    if _CJK.match(tok):
        return (*tok, *(tok[i : i + 2] for i in range(len(tok) - 1)))
    low = tok.lower()
    is_code = "." in tok or "_" in tok or any(c.isupper() for c in tok[1:])
    if not is_code:
        return () if low in STOPWORDS else (_stem(low),)
    out = [low]
    for part in re.split(r"[._]+", tok):
        if not part:
            continue
        subs = CAMEL.findall(part) if part.lower() != part else [part]
        plow = part.lower()
        if plow != low:
            out.append(_stem(plow))
        if len(subs) > 1:
            out.extend(s.lower() for s in subs if len(s) > 1)
    return tuple(out)


# ---------------------------------------------------------------- abbreviation groups
CONCEPT_PREFIX = "\u00a7"  # "§": cannot come out of _TOKEN, so a concept never collides with a word
MAX_PHRASE = 6
Form = tuple[str, ...]  # the base tokens of one form of a group


@functools.cache
def _groups() -> tuple[dict[Form, int], tuple[Form, ...], frozenset[Form], frozenset[str]]:
    """{base-token tuple of a form: group index}, each group's forms (canonical first), every
    proper prefix of a form (a run that is none of them cannot grow into a match), and the first
    token of every form."""
    data = read_data("abbreviations.yaml")
    groups = tuple(tuple(str(f) for f in g) for g in data.get("groups", []))
    table: dict[Form, int] = {}
    for gi, forms in enumerate(groups):
        for form in forms:
            key = tuple(base_tokens(form))
            if key and len(key) <= MAX_PHRASE:
                table.setdefault(key, gi)
    prefixes = frozenset(key[:n] for key in table for n in range(1, len(key)))
    return table, groups, prefixes, frozenset(key[0] for key in table)


def concept_token(group: int) -> str:
    return f"{CONCEPT_PREFIX}{group}"


def matched_spans(base: list[str]) -> list[tuple[int, int, int]]:
    """(group, start, length) for every form found as a run of consecutive base tokens."""
    table, _, prefixes, firsts = _groups()
    out: list[tuple[int, int, int]] = []
    n = len(base)
    for i in range(n):
        if base[i] not in firsts:  # most tokens start no form: one set lookup (index build time)
            continue
        run: tuple[str, ...] = ()
        for L in range(1, min(MAX_PHRASE, n - i) + 1):
            run = (*run, base[i + L - 1])
            g = table.get(run)
            if g is not None:
                out.append((g, i, L))
            if run not in prefixes:
                break
    return out


def matched_groups(base: list[str]) -> list[int]:
    """Groups whose forms occur in the tokens, in order of first match."""
    return list(dict.fromkeys(g for g, _, _ in matched_spans(base)))


def concepts(base: list[str]) -> list[str]:
    return [concept_token(g) for g in matched_groups(base)]


def group_forms(group: int) -> tuple[str, ...]:
    return _groups()[1][group]
