"""Pages of long answers for MCP and HTTP alike: opaque cursors, history newest first, listings."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from kbase.errors import InvalidArgument

DEFAULT_HISTORY_LIMIT = 20
MAX_HISTORY_LIMIT = 200
DEFAULT_LIST_LIMIT = 50
MAX_LIST_LIMIT = 500
CURSOR_PATTERN = r"^[0-9]{1,9}$"


def decode_cursor(cursor: str | None) -> int:
    """A cursor is the position of the next item, as text; clients pass it back as given."""
    if not cursor:
        return 0
    if isinstance(cursor, str) and re.fullmatch(CURSOR_PATTERN, cursor):
        return int(cursor)
    raise InvalidArgument("cursor must be a next_cursor this server gave out", "cursor")


def page_history(
    result: Any, since: str | None, until: str | None, limit: int, cursor: str | None
) -> dict[str, Any]:
    """A HistoryResult as one page: PRs in [since, until], newest first, `limit` from `cursor`."""
    from kbase.schema import SearchQuery

    SearchQuery.parse(query="x", since=since, until=until)  # the same date checks as search
    rows = [
        r
        for r in (p.model_dump(mode="json") for p in result.prs)
        if (not since or r["date"][:10] >= since) and (not until or r["date"][:10] <= until)
    ]
    # direct pushes carry no PR number: the sha breaks ties instead
    rows.sort(key=lambda r: (r["date"], r["pr"] or -1, r.get("sha") or ""), reverse=True)
    offset = decode_cursor(cursor)
    data = result.model_dump(mode="json", exclude={"prs"})
    data.update(order="newest-first", total=len(rows), prs=rows[offset : offset + limit])
    data["next_cursor"] = str(offset + limit) if offset + limit < len(rows) else None
    return data


def page_list(
    entries: list[Any], status: str | None, tag: str | None, limit: int, cursor: str | None
) -> dict[str, Any]:
    """Entries filtered by status and tag, counted by kind/status/tag; one page of them (JSON)."""
    if tag:
        from kbase.schema import SearchQuery

        tag = SearchQuery.parse(query="x", tags=[tag]).tags[0]
    rows = [
        e for e in entries if (status is None or e.status == status) and (not tag or tag in e.tags)
    ]
    offset = decode_cursor(cursor)
    return {
        "total": len(rows),
        "counts": {
            "kind": Counter(e.kind for e in rows),
            "status": Counter(e.status for e in rows),
            "tags": Counter(t for e in rows for t in e.tags),
        },
        "next_cursor": str(offset + limit) if offset + limit < len(rows) else None,
        "entries": [e.model_dump(mode="json") for e in rows[offset : offset + limit]],
    }
