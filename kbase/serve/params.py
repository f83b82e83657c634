"""What only the servers take, beyond `SearchQuery`'s checks: argument-name aliases, `max_chars`,
entry ids and section names. Nothing heavy is imported: it loads without fastapi or mcp."""

from __future__ import annotations

import re
from typing import Any

from kbase.errors import InvalidArgument
from kbase.schema import SearchQuery
from kbase.search_query import SLUG_RE, opt_str

DEFAULT_MAX_CHARS = 6000
MIN_MAX_CHARS = 300
MAX_MAX_CHARS = 200_000

_SLUG = SLUG_RE.pattern.strip("^$")
# A skill name or pr:<repo>#<N>, as the HTTP and MCP schemas publish it.
ID_PATTERN = rf"^([a-z0-9]+(-[a-z0-9]+)*|pr:{_SLUG}#[0-9]{{1,9}})$"
DAY_PATTERN = r"^\d{4}-\d{2}-\d{2}$"
SECTION_PATTERN = r"^[^\x00-\x1f/\\]{1,120}$"

# Every tool's arguments (search takes every SearchQuery field).
TOOL_ARGS: dict[str, tuple[str, ...]] = {
    "search": (*SearchQuery.model_fields, "max_chars"),
    "get": ("id", "section", "env", "max_chars"),
    "history": ("repo", "family", "since", "until", "limit", "cursor", "max_chars"),
    "list": ("kind", "status", "tag", "limit", "cursor", "max_chars"),
    "stale": ("env", "max_chars"),
    "feedback": ("id", "verdict", "note"),
    "propose": ("title", "symptom", "cause", "fix", "snippet"),
}
_BUDGET = {"budget": "max_chars", "maxChars": "max_chars"}
# Agents guess argument names; these are the guesses we have seen or expect, mapped to ours.
ALIASES: dict[str, dict[str, str]] = {
    "search": {
        **dict.fromkeys(("question", "q", "text", "search", "prompt"), "query"),
        **dict.fromkeys(("top_k", "limit", "n", "num_results", "count"), "k"),
        "tag": "tags",
        "statuses": "status",
        **_BUDGET,
        "max_length": "max_chars",
        "type": "kind",
        "environment": "env",
    },
    "get": {
        **dict.fromkeys(("entry_id", "name", "skill", "entry"), "id"),
        "heading": "section",
        "environment": "env",
    },
    "history": {
        **dict.fromkeys(("repository", "project"), "repo"),
        **dict.fromkeys(("name", "kernel_family"), "family"),
        **_BUDGET,
        "page_size": "limit",
        "after": "since",
        "before": "until",
    },
    "list": {"type": "kind", "tags": "tag", "page_size": "limit", "budget": "max_chars"},
    "stale": _BUDGET,
    "feedback": {"entry_id": "id", "name": "id", "rating": "verdict", "comment": "note"},
    "propose": {"error": "symptom", "error_text": "symptom", "solution": "fix", "code": "snippet"},
}


def apply_aliases(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """Rename guessed argument names to ours; unknown names are reported, not silently dropped."""
    if not isinstance(args, dict):
        raise InvalidArgument("arguments must be a JSON object")
    table, known = ALIASES.get(tool, {}), TOOL_ARGS[tool]
    out: dict[str, Any] = {}
    for key, value in args.items():
        name = table.get(key, key)
        if name in out and key != name:
            continue  # the canonical name was given too; it wins
        out[name] = value
    unknown = sorted(set(out) - set(known))
    if unknown:
        raise InvalidArgument(
            f"unknown argument(s) {', '.join(map(repr, unknown))}; {tool} takes {', '.join(known)}"
        )
    return out


def check_id(v: Any) -> str:
    """A skill name or pr:<repo>#<N>; anything else (paths, "..", URLs) is refused unread."""
    if v is None:
        raise InvalidArgument(
            "id is required: a skill name (e.g. gpu-kernel-timing) or pr:<repo>#<N>"
        )
    if not isinstance(v, str):
        raise InvalidArgument(f"id must be a string, got {type(v).__name__}")
    v = v.strip()
    if len(v) <= 120 and re.match(ID_PATTERN, v):  # a PR id is looked up, never used as a path
        return v
    raise InvalidArgument(
        f"invalid id {v[:80]!r}: expected a skill name (lowercase words joined by '-') "
        "or pr:<repo>#<N>"
    )


def check_section(v: Any) -> str | None:
    v = opt_str("section", v)
    if v is not None and not re.match(SECTION_PATTERN, v):
        raise InvalidArgument("section must be a heading title of at most 120 characters")
    return v
