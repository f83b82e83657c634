"""Lexical tokens for BM25 that respect code identifiers and Chinese text.

`tl.dot`, `num_warps`, `__shfl_down_sync` and `sm_90a` are kept whole *and* split into
their parts, so a query for either form matches. Runs of CJK characters become
unigrams and bigrams: Chinese has no spaces, and bigrams are the usual cheap stand-in
for a word segmenter.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"  # identifiers, dotted paths
    r"|\d+(?:\.\d+)?[A-Za-z]*"  # numbers with unit suffixes: 2**31 → 2, 31; 16kb; 90a
    r"|[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+"  # CJK runs
)
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")

STOPWORDS = frozenset(
    """a an and are as at be but by can do does for from has have how i if in into is it its
    of on or so than that the their then there these this to was we what when where which
    while why will with you your my me not no yes should would could""".split()
)


def _stem(word: str) -> str:
    # Plural folding only: aggressive stemming mangles identifiers like `kwargs` or `cls`.
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def tokens(text: str) -> list[str]:
    out: list[str] = []
    for m in _TOKEN.finditer(text):
        tok = m.group(0)
        if _CJK.match(tok):
            out.extend(tok)
            out.extend(tok[i : i + 2] for i in range(len(tok) - 1))
            continue
        low = tok.lower()
        is_code = "." in tok or "_" in tok or any(c.isupper() for c in tok[1:])
        if is_code:
            out.append(low)
            for part in re.split(r"[._]+", tok):
                if not part:
                    continue
                subs = _CAMEL.findall(part) if part.lower() != part else [part]
                plow = part.lower()
                if plow != low:
                    out.append(_stem(plow))
                if len(subs) > 1:
                    out.extend(s.lower() for s in subs if len(s) > 1)
            continue
        if low in STOPWORDS:
            continue
        out.append(_stem(low))
    return out
