"""Nearest valid names for a wrong one, so an error can say what was probably meant: an agent
corrects itself in one step instead of searching blind."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def nearest(word: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """Up to n choices closest to word: shared prefixes and substrings first, then difflib."""
    pool = sorted(set(choices))
    w = word.lower().strip()
    if not w or not pool:
        return []
    out: list[str] = []
    for c in pool:  # "sm9" -> "sm90", "attn" -> no, "attention-fwd" -> "attention"
        cl = c.lower()
        if cl.startswith(w) or w.startswith(cl) or (len(w) >= 3 and w in cl):
            out.append(c)
    lowered = {c.lower(): c for c in pool}
    for m in difflib.get_close_matches(w, list(lowered), n=n, cutoff=0.5):
        if lowered[m] not in out:
            out.append(lowered[m])
    return out[:n]


def did_you_mean(word: str, choices: Iterable[str], what: str, n: int = 3) -> str:
    """`; did you mean 'x' or 'y'?` or `; known <what>: a, b, c` when nothing is close."""
    pool = sorted(set(choices))
    near = nearest(word, pool, n)
    if near:
        return "; did you mean " + " or ".join(repr(x) for x in near) + "?"
    if not pool:
        return f"; there are no {what}"
    shown = ", ".join(pool[:12]) + (f", … ({len(pool)} in all)" if len(pool) > 12 else "")
    return f"; known {what}: {shown}"
