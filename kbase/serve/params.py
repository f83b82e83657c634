"""Argument checking shared by the MCP server and the HTTP API.

Both front ends accept input from programs we do not control (agents, scripts, the network),
so every value is checked here, once, with an error message an agent can act on. Nothing in
this module imports a heavy dependency: it must load on a box without fastapi or mcp.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kbase.schema import NAME_RE

MAX_QUERY_CHARS = 2000
MAX_K = 50
DEFAULT_K = 5
DEFAULT_MAX_CHARS = 6000
MIN_MAX_CHARS = 300
MAX_MAX_CHARS = 200_000
MAX_TAGS = 16
KINDS = ("skill", "pr")
STATUSES = ("verified", "failing", "stale-age", "stale-env", "stale-source", "unverified", "mined")
MODES = ("hybrid", "bm25", "dense")

# An archive repo or family name: a path component, never a path (no "/" and no "..").
SLUG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")
PR_ID_RE = re.compile(r"^pr:([A-Za-z0-9][A-Za-z0-9._+-]{0,99})#([0-9]{1,9})$")
SECTION_RE = re.compile(r"^[^\x00-\x1f/\\]{1,120}$")


class ParamError(ValueError):
    """Bad input from a client: the message says what was wrong and what is accepted."""


# Agents guess argument names; these are the guesses we have seen or expect, mapped to ours.
ALIASES: dict[str, dict[str, str]] = {
    "search": {
        "question": "query",
        "q": "query",
        "text": "query",
        "search": "query",
        "prompt": "query",
        "top_k": "k",
        "limit": "k",
        "n": "k",
        "num_results": "k",
        "count": "k",
        "tag": "tags",
        "statuses": "status",
        "budget": "max_chars",
        "maxChars": "max_chars",
        "max_length": "max_chars",
        "type": "kind",
    },
    "get": {"entry_id": "id", "name": "id", "skill": "id", "entry": "id", "heading": "section"},
    "history": {
        "repository": "repo",
        "project": "repo",
        "name": "family",
        "kernel_family": "family",
        "budget": "max_chars",
        "maxChars": "max_chars",
    },
    "stale": {"budget": "max_chars", "maxChars": "max_chars"},
}
KNOWN_ARGS: dict[str, tuple[str, ...]] = {
    "search": (
        "query",
        "k",
        "kind",
        "repo",
        "tags",
        "status",
        "max_chars",
        "mode",
        "since",
        "until",
    ),
    "get": ("id", "section", "max_chars"),
    "history": ("repo", "family", "max_chars"),
    "stale": ("max_chars",),
}


def apply_aliases(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """Rename guessed argument names to ours; unknown names are reported, not silently dropped."""
    if not isinstance(args, dict):
        raise ParamError("arguments must be a JSON object")
    table = ALIASES.get(tool, {})
    known = KNOWN_ARGS.get(tool)
    out: dict[str, Any] = {}
    for key, value in args.items():
        name = table.get(key, key)
        if name in out and key != name:
            continue  # the canonical name was given too; it wins
        out[name] = value
    if known is not None:
        unknown = sorted(set(out) - set(known))
        if unknown:
            raise ParamError(
                f"unknown argument(s) {', '.join(map(repr, unknown))}; {tool} takes {', '.join(known)}"
            )
    return out


def check_query(q: Any) -> str:
    if q is None:
        raise ParamError("query is required: a symptom, an error message or a topic")
    if not isinstance(q, str):
        raise ParamError(f"query must be a string, got {type(q).__name__}")
    if len(q) > MAX_QUERY_CHARS:
        raise ParamError(f"query is {len(q)} characters long; the limit is {MAX_QUERY_CHARS}")
    q = q.strip()
    if not q:
        raise ParamError("query is empty")
    if "\x00" in q:
        raise ParamError("query contains a NUL character")
    return q


def _int(name: str, v: Any, lo: int, hi: int, default: int) -> int:
    if v is None:
        return default
    if isinstance(v, bool):
        raise ParamError(f"{name} must be an integer, got a boolean")
    if isinstance(v, str) and re.fullmatch(r"\s*-?\d{1,9}\s*", v):
        v = int(v)  # "5" from a query string or a sloppy client
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if not isinstance(v, int):
        raise ParamError(f"{name} must be an integer, got {type(v).__name__}")
    if not lo <= v <= hi:
        raise ParamError(f"{name} must be between {lo} and {hi}, got {v}")
    return v


def check_k(k: Any) -> int:
    return _int("k", k, 1, MAX_K, DEFAULT_K)


def check_max_chars(v: Any, default: int = DEFAULT_MAX_CHARS) -> int:
    return _int("max_chars", v, MIN_MAX_CHARS, MAX_MAX_CHARS, default)


def _opt_str(name: str, v: Any) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str):
        raise ParamError(f"{name} must be a string, got {type(v).__name__}")
    v = v.strip()
    return v or None


def check_kind(v: Any) -> str | None:
    v = _opt_str("kind", v)
    if v is None:
        return None
    v = v.lower()
    v = {"skills": "skill", "prs": "pr", "pull-request": "pr", "card": "pr"}.get(v, v)
    if v not in KINDS:
        raise ParamError(f"kind must be one of {', '.join(KINDS)}, got {v!r}")
    return v


def check_mode(v: Any) -> str:
    v = _opt_str("mode", v) or "hybrid"
    if v not in MODES:
        raise ParamError(f"mode must be one of {', '.join(MODES)}, got {v!r}")
    return v


def check_day(name: str, v: Any) -> str | None:
    v = _opt_str(name, v)
    if v is not None and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", v):
        raise ParamError(f"{name} must be a date like 2025-01-31, got {v[:40]!r}")
    return v


def check_slug(name: str, v: Any, required: bool = False) -> str | None:
    v = _opt_str(name, v)
    if v is None:
        if required:
            raise ParamError(f"{name} is required")
        return None
    if not SLUG_RE.match(v) or ".." in v:
        raise ParamError(
            f"{name} {v[:80]!r} is not a valid name (letters, digits, '.', '_', '+', '-'; "
            "at most 100 characters)"
        )
    return v


def _str_list(name: str, v: Any, limit: int) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str) and v.strip().startswith("["):
        try:
            v = json.loads(v)  # some clients send a JSON list inside a string
        except ValueError:
            raise ParamError(f"{name} must be a list of strings") from None
    if isinstance(v, str):
        v = [s for s in re.split(r"[,\s]+", v) if s]  # "a=b,c=d" is a common shortcut
    if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
        raise ParamError(f"{name} must be a list of strings")
    v = [x.strip() for x in v if x.strip()]
    if len(v) > limit:
        raise ParamError(f"at most {limit} {name} values, got {len(v)}")
    return v


def check_tags(v: Any) -> list[str]:
    from kbase.retrieval.searcher import normalize_tag

    out = []
    for t in _str_list("tags", v, MAX_TAGS):
        if len(t) > 100:
            raise ParamError("a tag is at most 100 characters")
        try:
            out.append(normalize_tag(t))
        except ValueError as exc:
            raise ParamError(str(exc)) from None
    return out


def check_status(v: Any) -> list[str]:
    out = _str_list("status", v, len(STATUSES))
    for s in out:
        if s not in STATUSES:
            raise ParamError(f"status must be one of {', '.join(STATUSES)}, got {s[:40]!r}")
    return out


def check_id(v: Any) -> str:
    """A skill name or pr:<repo>#<N>; anything else (paths, '..', URLs) is refused before any lookup."""
    if v is None:
        raise ParamError("id is required: a skill name (e.g. gpu-kernel-timing) or pr:<repo>#<N>")
    if not isinstance(v, str):
        raise ParamError(f"id must be a string, got {type(v).__name__}")
    v = v.strip()
    if len(v) <= 64 and NAME_RE.match(v):
        return v
    if PR_ID_RE.match(v) and ".." not in v:
        return v
    raise ParamError(
        f"invalid id {v[:80]!r}: expected a skill name (lowercase words joined by '-') "
        "or pr:<repo>#<N>"
    )


def check_section(v: Any) -> str | None:
    v = _opt_str("section", v)
    if v is None:
        return None
    if not SECTION_RE.match(v):
        raise ParamError("section must be a heading title of at most 120 characters")
    return v


def search_args(raw: dict[str, Any]) -> dict[str, Any]:
    """Checked keyword arguments for KnowledgeBase.search, plus max_chars."""
    return {
        "query": check_query(raw.get("query")),
        "k": check_k(raw.get("k")),
        "kind": check_kind(raw.get("kind")),
        "repo": check_slug("repo", raw.get("repo")),
        "tags": check_tags(raw.get("tags")),
        "status": check_status(raw.get("status")),
        "mode": check_mode(raw.get("mode")),
        "since": check_day("since", raw.get("since")),
        "until": check_day("until", raw.get("until")),
        "max_chars": check_max_chars(raw.get("max_chars")),
    }
