"""What other parts ask of an archive's history, from light records of its cards: when a path
was last touched (staleness, `latest_touch`) and a family's timeline (`kbase history`)."""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kbase.ingest.cards import ARCHIVE_DIR, CardProblems, card_paths, load_card

from kbase.schema.archive import compile_globs


@dataclass(frozen=True)
class CardFacts:
    """What staleness and timelines need, without building an Entry."""

    pr: int | None  # None for a direct push's commit card
    date: str
    title: str
    paths: tuple[str, ...]  # every path and old path the PR touched
    renames: tuple[tuple[str, str], ...]  # (old, new)
    families: tuple[str, ...]
    categories: tuple[str, ...]
    nfiles: int
    reverts: int | None
    sha: str = ""
    reverted_by: tuple[str, ...] = ()


# path -> ((mtime_ns, size), facts): re-parsed only when the file changes, so repeated
# staleness checks over thousands of cards cost a directory scan and stats
_FACTS_CACHE: dict[str, tuple[tuple[int, int], CardFacts | None]] = {}


def card_facts(root: Path, repo: str) -> list[CardFacts]:
    out: list[CardFacts] = []
    for key in card_paths(Path(root), repo):
        try:
            st = os.stat(key)
        except OSError:
            continue
        hit = _FACTS_CACHE.get(key)
        if hit is None or hit[0] != (st.st_mtime_ns, st.st_size):
            hit = _FACTS_CACHE[key] = ((st.st_mtime_ns, st.st_size), _read_facts(key, root))
        if hit[1] is not None:
            out.append(hit[1])
    return out


def _read_facts(path: str, root: Path) -> CardFacts | None:
    try:
        c = load_card(Path(path), Path(root)).card
    except CardProblems:
        return None
    renames = tuple((f.old_path, f.path) for f in c.files if f.old_path)
    return CardFacts(
        pr=c.pr,
        date=c.date,
        title=c.title,
        paths=tuple(dict.fromkeys([f.path for f in c.files] + [old for old, _ in renames])),
        renames=renames,
        families=tuple(c.families),
        categories=tuple(c.categories),
        nfiles=len(c.files),
        reverts=c.reverts,
        sha=c.sha,
        reverted_by=tuple(c.reverted_by),
    )


def _when(date: str) -> _dt.datetime:
    d = _dt.datetime.fromisoformat(date)
    return d if d.tzinfo else d.replace(tzinfo=_dt.UTC)


def latest_touch(root: Path, repo: str, globs: list[str]) -> str | None:
    """ISO date of the newest card in pr_archive/<repo>/ touching a path that matches any glob
    (`*` within a segment, `**` across segments, a directory matches what is under it), or None."""
    if not globs:
        return None
    rx = compile_globs(tuple(globs))
    best: CardFacts | None = None
    for f in card_facts(root, repo):
        if (best is None or _when(f.date) > _when(best.date)) and any(rx.match(p) for p in f.paths):
            best = f
    return best.date if best else None


def read_families(root: Path, repo: str) -> dict[str, list[str]]:
    """Family globs recorded by the last mine (so history works without the recipe file at hand)."""
    p = Path(root) / ARCHIVE_DIR / repo / ".state.json"
    try:
        return dict(json.loads(p.read_text(encoding="utf-8")).get("families") or {})
    except (FileNotFoundError, ValueError):
        return {}


def timeline(
    root: Path, repo: str, family: str | None, globs: Iterable[str] | None = None
) -> list[dict]:
    """The family's PRs and direct pushes, oldest first (family None: every card touching
    `globs`). Renames are followed backwards: once a card renames X to a path of the family,
    older cards that touched X belong to the timeline too (marked via_rename)."""
    facts = sorted(card_facts(root, repo), key=lambda f: _when(f.date), reverse=True)
    rx = compile_globs(tuple(globs)) if globs else None
    followed: set[str] = set()
    rows: list[dict] = []
    for f in facts:
        direct = (family is not None and family in f.families) or (
            rx is not None and any(rx.match(p) for p in f.paths)
        )
        via = not direct and any(p in followed for p in f.paths)
        if not (direct or via):
            continue
        for old, new in f.renames:
            if (rx is not None and rx.match(new)) or new in followed:
                followed.add(old)
        matched = [p for p in f.paths if (rx is not None and rx.match(p)) or p in followed]
        rows.append(
            {
                "date": f.date,
                "pr": f.pr,
                "sha": f.sha,
                "kind": "pr" if f.pr is not None else "commit",
                "title": f.title,
                "categories": list(f.categories),
                "files": matched,
                "files_total": f.nfiles,
                "reverts": f.reverts,
                "reverted_by": list(f.reverted_by),
                "via_rename": via,
            }
        )
    rows.reverse()
    return rows
