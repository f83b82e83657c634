"""Feedback on entries: an append-only log (`<root>/feedback/log.jsonl`: versions and merges like
the ledger), shown with the entry and a mild ranking signal; never a verification status."""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import get_args

from kbase.closed_sets import FeedbackVerdict
from kbase.errors import InvalidArgument

LOG = Path("feedback") / "log.jsonl"
MAX_NOTE_CHARS = 1000
MAX_NUDGE = 0.1  # a score moves by at most 10%: feedback orders near-ties, it never buries a hit
RECENT_NOTES = 3

# verdict -> its sign in the ranking signal, and what it tells a reader
VERDICTS: dict[str, tuple[int, str]] = {
    "helpful": (+1, "acting on the entry solved the problem"),
    "harmful": (-1, "acting on the entry made things worse or was wrong"),
    "outdated": (-1, "the entry no longer matches the current tools or code"),
}
assert tuple(VERDICTS) == get_args(FeedbackVerdict)
SOURCES = ("cli", "mcp", "http", "python")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class FeedbackError(InvalidArgument):
    """Feedback that cannot be recorded; the message names the field."""


@dataclass
class Record:
    at: str
    id: str
    verdict: str
    note: str
    source: str

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Summary:
    """What feedback says about one entry."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(VERDICTS, 0))
    last_at: str | None = None
    recent: list[dict] = field(default_factory=list)  # newest first

    def nudge(self) -> float:
        """Score multiplier in [1 - MAX_NUDGE, 1 + MAX_NUDGE], saturating with the net count."""
        net = sum(VERDICTS[v][0] * n for v, n in self.counts.items())
        return 1.0 + MAX_NUDGE * math.tanh(net / 3.0)

    def as_dict(self) -> dict:
        return {
            "counts": dict(self.counts),
            "total": sum(self.counts.values()),
            "last_at": self.last_at,
            "recent": list(self.recent),
        }


def check_note(note: object) -> str:
    if note is None:
        return ""
    if not isinstance(note, str):
        raise FeedbackError(f"note must be a string, got {type(note).__name__}")
    note = note.strip()
    if len(note) > MAX_NOTE_CHARS:
        raise FeedbackError(f"note is {len(note)} characters long; the limit is {MAX_NOTE_CHARS}")
    if _CONTROL.search(note):
        raise FeedbackError("note contains control characters")
    return note


def check_verdict(verdict: object) -> str:
    if not isinstance(verdict, str) or verdict.strip().lower() not in VERDICTS:
        raise FeedbackError(f"verdict must be one of {', '.join(VERDICTS)}, got {verdict!r}")
    return verdict.strip().lower()


def log_path(root: Path) -> Path:
    return Path(root) / LOG


def append(
    root: Path, entry_id: str, verdict: str, note: str = "", source: str = "python"
) -> Record:
    """Append one record (the caller has checked that the id exists)."""
    if source not in SOURCES:
        raise FeedbackError(f"source must be one of {', '.join(SOURCES)}")
    rec = Record(
        at=datetime.now(UTC).isoformat(timespec="seconds"),
        id=entry_id,
        verdict=check_verdict(verdict),
        note=check_note(note),
        source=source,
    )
    path = log_path(root)
    path.parent.mkdir(exist_ok=True)
    line = json.dumps(rec.as_dict(), ensure_ascii=False, separators=(",", ":")) + "\n"
    # O_APPEND + one write + flock: concurrent servers never interleave or lose a line.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    return rec


def summaries(root: Path) -> dict[str, Summary]:
    """id -> Summary, from the feedback log."""
    out: dict[str, Summary] = {}
    try:
        fh = open(log_path(root), encoding="utf-8")
    except FileNotFoundError:
        return {}
    with fh:
        for line in fh:
            try:
                r = json.loads(line)
                verdict, eid = r["verdict"], r["id"]
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line from a crash is skipped, not fatal
            if verdict not in VERDICTS or not isinstance(eid, str):
                continue
            s = out.setdefault(eid, Summary())
            s.counts[verdict] += 1
            s.last_at = r.get("at") or s.last_at
            s.recent.insert(0, {k: r.get(k) for k in ("at", "verdict", "note")})
            del s.recent[RECENT_NOTES:]
    return out


def rerank(hits: list, root: Path) -> list:
    """Hits re-ordered by score × nudge (stable); scores are left as the retriever gave them."""
    sums = summaries(root)
    if not any(h.id in sums for h in hits):
        return hits
    return sorted(hits, key=lambda h: -h.score * (sums[h.id].nudge() if h.id in sums else 1.0))
