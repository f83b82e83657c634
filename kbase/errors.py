"""Every error kbase raises on purpose, rooted in `KbaseError`. The adapters translate by class
(`http_status`, `exit_code`: 1 for findings, 2 for what could not be done), never by message. A
wrong name gets the nearest valid ones (`did_you_mean`): an agent corrects itself in one step."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kbase.schema import Problem


class KbaseError(Exception):
    """Base of every error kbase raises deliberately; anything else is a bug."""

    http_status = 500
    exit_code = 2
    code = "error"  # the `code` of this error in JSON output


class InvalidArgument(KbaseError, ValueError):
    """A value a caller passed is not accepted; the message says what is and names the field."""

    http_status = 400
    code = "invalid-argument"

    def __init__(self, message: str, field: str | None = None):
        self.field = field
        super().__init__(message)


class NotFound(KbaseError, KeyError):
    """An id, section, archive or family that does not exist."""

    http_status = 404
    exit_code = 1  # docs/agents.md: an unknown id is a finding, not bad usage
    code = "not-found"

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "not found"


class Unavailable(KbaseError, RuntimeError):
    """The knowledge base cannot answer yet (no index, and building one was not allowed)."""

    http_status = 503
    code = "unavailable"


class TooManyWrites(KbaseError):
    """A server's write rate limit is reached; the message says when to try again."""

    http_status = 429
    code = "too-many-writes"


class ProblemsError(KbaseError):
    """Located problems (file, line, field) in the knowledge base's own input: the one carrier
    of problem lists (parse, lint, recipe and card errors all raise a subclass)."""

    code = "problems"

    def __init__(self, problems: list[Problem] | Problem):
        self.problems = list(problems) if isinstance(problems, (list, tuple)) else [problems]
        super().__init__("\n".join(str(p) for p in self.problems))


def nearest(word: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """Up to n choices closest to word: shared prefixes and substrings first, then difflib."""
    import difflib  # only when an error is being worded

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
