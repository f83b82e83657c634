"""Checkpoints of a running mine: `.progress.json` says how many of the planned commits have
their cards on disk, so a killed `kbase mine` resumes after them instead of starting over.

The key (head, range, mode, recipe digest) must match exactly; anything else, or a card
that is gone, starts the run over, which loses nothing either.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kbase.ingest.card_format import split_card

from kbase.schema import PRCard

PROGRESS_FILE = ".progress.json"  # only while a mine runs


def atomic_write(path: Path, text: str) -> None:
    """A temporary file, then a rename: a killed process leaves the old file or the new one."""
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    os.replace(tmp, path)


_COUNTERS = ("commits", "without_pr", "direct_pushes", "written", "unchanged")


def checkpoint(folder: Path, key: dict, done: int, writer) -> None:
    """Every card of the first `done` streamed commits is on disk: say so, so that a killed
    mine resumes after them instead of starting over."""
    r = writer.report
    data = {
        "key": key,
        "done": done,
        "stems": list(writer.cards),
        "counters": {k: getattr(r, k) for k in _COUNTERS},
        "without_pr_sample": r.without_pr_sample,
        "warnings": r.warnings,
    }
    atomic_write(folder / PROGRESS_FILE, json.dumps(data, ensure_ascii=False) + "\n")


def resume(folder: Path, key: dict, writer, order: list[str]) -> int:
    """Commits of `order` already mined by an interrupted run with the same key (0: none).
    The cards it wrote are read back, so merges and revert links come out as uninterrupted."""
    p = folder / PROGRESS_FILE
    try:
        data = json.loads(p.read_text(encoding="utf-8")) if p.exists() else None
    except (OSError, ValueError):
        data = None
    if not data or data.get("key") != key or not 0 < data.get("done", 0) <= len(order):
        p.unlink(missing_ok=True)
        return 0
    cards: dict[str, PRCard] = {}
    for stem in data["stems"]:
        try:
            text = (folder / f"{stem}.md").read_text(encoding="utf-8")
            cards[stem] = PRCard.model_validate(split_card(text).meta)
        except Exception:  # a card gone or damaged since: start over, nothing is lost
            p.unlink(missing_ok=True)
            return 0
    writer.cards.update(cards)
    done = int(data["done"])
    writer.seen_shas.update(order[:done])
    for k, v in data["counters"].items():
        setattr(writer.report, k, v)
    writer.report.without_pr_sample = list(data.get("without_pr_sample", []))
    writer.report.warnings = list(data.get("warnings", []))
    writer.report.resumed_after = done
    return done
