"""PR cards as index entries, plus the two questions other parts ask of the archive:
when was a path last touched (staleness) and what is a family's timeline (`kbase history`).

Called by the lead's indexer (`load_card_entries`) and the validators (`latest_touch`).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kbase.ingest.card_format import CardError, notes_text, section, split_card
from kbase.ingest.files import FileProblem, display_path, read_text
from kbase.ingest.recipes import validation_problems
from pydantic import ValidationError

from kbase.errors import ProblemsError
from kbase.globs import compile_globs
from kbase.schema import Chunk, Entry, PRCard, Problem

ARCHIVE_DIR = "pr_archive"
FILES_PER_CHUNK = 12
_SKIP_DIRS = {"recipes"}


def card_files(root: Path, repo: str | None = None) -> list[Path]:
    """pr_archive/<name>/<N>.md for every archive (or one), skipping recipes/ and README files."""
    return [Path(p) for p in card_paths(root, repo)]


def card_paths(root: Path, repo: str | None = None) -> list[str]:
    """card_files as strings: a re-index lists thousands, and Path objects were a tenth of it."""
    base = root / ARCHIVE_DIR
    if not base.is_dir():
        return []
    dirs = (
        [base / repo]
        if repo
        else sorted(
            d
            for d in base.iterdir()
            if d.is_dir() and d.name not in _SKIP_DIRS and not d.name.startswith(".")
        )
    )
    out: list[str] = []
    for d in dirs:
        if not d.is_dir():
            continue
        sd = str(d) + os.sep
        with os.scandir(d) as it:
            names = [
                e.name
                for e in it
                if e.name.endswith(".md") and not e.name.startswith(".") and e.is_file()
            ]
        out.extend(
            sd + n for n in sorted(names, key=lambda n: (len(n), n)) if n.lower() != "readme.md"
        )
    return out


def _validation_problems(exc: ValidationError, yaml_text: str, shown: str) -> list[Problem]:
    import yaml

    try:
        node = yaml.compose(yaml_text, Loader=yaml.SafeLoader)
    except (yaml.YAMLError, RecursionError):
        node = None
    return validation_problems(exc, shown, node, first_line=2)


@dataclass
class LoadedCard:
    card: PRCard
    path: str
    text: str
    body: str
    body_line: int
    notes: str
    notes_line: int


def load_card(path: Path, root: Path) -> LoadedCard:
    """One card, validated. Raises CardProblems naming file, line and field."""
    shown = display_path(path, root)
    try:
        text = read_text(path, root)
    except FileProblem as fp:
        raise CardProblems([fp.problem]) from None
    try:
        parts = split_card(text)
    except CardError as ce:
        raise CardProblems(
            [Problem(path=shown, line=ce.line, field=ce.field, message=str(ce))]
        ) from None
    try:
        card = PRCard.model_validate(parts.meta)
    except ValidationError as exc:
        raise CardProblems(_validation_problems(exc, parts.yaml_text, shown)) from None
    folder = path.parent.name
    if card.repo != folder:
        raise CardProblems(
            [
                Problem(
                    path=shown,
                    line=2,
                    field="repo",
                    message=f"repo {card.repo!r} does not match the archive folder {folder!r}",
                )
            ]
        )
    want = str(card.pr) if card.pr is not None else f"commit-{card.sha[:12]}"
    if path.stem != want:
        what = f"pr {card.pr}" if card.pr is not None else f"commit {card.sha[:12]} (pr: null)"
        raise CardProblems(
            [
                Problem(
                    path=shown,
                    line=3,
                    field="pr",
                    message=f"{what} does not match the file name {path.name!r}",
                )
            ]
        )
    try:
        _dt.datetime.fromisoformat(card.date)
    except ValueError:
        raise CardProblems(
            [
                Problem(
                    path=shown,
                    line=_key_line(parts.yaml_text, "date"),
                    field="date",
                    message=f"date {card.date!r} is not ISO 8601",
                )
            ]
        ) from None
    return LoadedCard(
        card=card,
        path=shown,
        text=text,
        body=parts.body,
        body_line=parts.body_line,
        notes=parts.notes,
        notes_line=parts.notes_line,
    )


class CardProblems(ProblemsError):
    """A PR card that does not load; `.problems` says where and why."""


def _key_line(yaml_text: str, key: str) -> int:
    for i, line in enumerate(yaml_text.split("\n")):
        if line.startswith(f"{key}:"):
            return i + 2
    return 1


def entry_id(repo: str, pr: int | None, sha: str = "") -> str:
    """`pr:<repo>#<N>` for a PR card, `commit:<repo>@<short sha>` for a direct push."""
    return f"pr:{repo}#{pr}" if pr is not None else f"commit:{repo}@{sha[:12]}"


def card_label(c: PRCard) -> str:
    return f"PR #{c.pr}" if c.pr is not None else f"commit {c.sha[:12]}"


def card_entry(lc: LoadedCard) -> Entry:
    c = lc.card
    eid = entry_id(c.repo, c.pr, c.sha)
    label = card_label(c)
    chunks: list[Chunk] = []

    def add(sec: str, text: str, line: int) -> None:
        if text.strip():
            chunks.append(
                Chunk(
                    id=f"{eid}::{len(chunks)}",
                    entry_id=eid,
                    kind="pr",
                    section=sec,
                    text=text.strip(),
                    line=line,
                    path=lc.path,
                )
            )

    summary, s_off = section(lc.body, "Summary")
    head = [f"{c.title}", f"{c.repo} {label}, {c.date[:10]}"]
    if c.families:
        head.append("Families: " + ", ".join(c.families))
    head.append("Categories: " + ", ".join(c.categories))
    if c.tags.kernel_types:
        head.append("Kernel types: " + ", ".join(c.tags.kernel_types))
    add(
        "summary",
        "\n".join(head) + ("\n" + summary if summary else ""),
        lc.body_line + s_off if summary else 1,
    )
    _, f_off = section(lc.body, "Files")
    lines = [
        f"{f.old_path + ' -> ' if f.old_path else ''}{f.path}"
        + (f": {', '.join(f.symbols)}" if f.symbols else "")
        for f in c.files
    ]
    # short chunks: one long list of 60 files buries each symbol under BM25 length
    # normalisation and past the embedding model's input limit
    for i in range(0, max(len(lines), 1), FILES_PER_CHUNK):
        part = "\n".join(lines[i : i + FILES_PER_CHUNK])
        add(
            "files",
            f"Files changed by {c.repo} {label} ({c.title}):\n{part}",
            lc.body_line + f_off if f_off else 1,
        )
    desc, d_off = section(lc.body, "Description")
    if desc:
        add(
            "description",
            f"Description of {c.repo} {label} ({c.title}):\n{desc}",
            lc.body_line + d_off,
        )
    if c.touched:
        add(
            "symbols",
            f"Kernels and functions touched by {c.repo} {label} ({c.title}): "
            + ", ".join(c.touched[:60]),
            lc.body_line + section(lc.body, "Touched")[1],
        )
    notes = notes_text(lc.notes)
    if notes:
        add("notes", f"Notes on {c.repo} {label} ({c.title}):\n{notes}", lc.notes_line)
    tags = (
        c.tags.flat()
        + [f"family={f}" for f in c.families]
        + [f"category={x}" for x in c.categories]
        + [f"repo={c.repo}", f"card={c.kind}"]
    )
    return Entry(
        id=eid,
        kind="pr",
        title=c.title,
        path=lc.path,
        line=1,
        content_hash=hashlib.sha256(lc.text.encode("utf-8")).hexdigest(),
        chunks=chunks,
        tags=tags,
        repo=c.repo,
        pr=c.pr,
        date=c.date,
        families=list(c.families),
        categories=list(c.categories),
    )


def load_card_entries(root: Path) -> tuple[list[Entry], list[Problem]]:
    """Every card under <root>/pr_archive as an index Entry (kind "pr"); bad cards become Problems
    and are skipped.
    """
    root = Path(root)
    entries: list[Entry] = []
    problems: list[Problem] = []
    for p in card_files(root):
        try:
            entries.append(card_entry(load_card(p, root)))
        except CardProblems as cp:
            problems.extend(cp.problems)
    return entries, problems


# --------------------------------------------------------------------------- light records


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


# (path) -> (mtime_ns, size, facts): re-parsed only when the file changes, so repeated
# staleness checks over thousands of cards cost a directory scan and stats
_FACTS_CACHE: dict[str, tuple[int, int, CardFacts | None]] = {}


def card_facts(root: Path, repo: str) -> list[CardFacts]:
    out: list[CardFacts] = []
    for p in card_files(Path(root), repo):
        try:
            st = p.stat()
        except OSError:
            continue
        key = str(p)
        hit = _FACTS_CACHE.get(key)
        if hit and hit[0] == st.st_mtime_ns and hit[1] == st.st_size:
            if hit[2] is not None:
                out.append(hit[2])
            continue
        try:
            c = load_card(p, Path(root)).card
            facts = CardFacts(
                pr=c.pr,
                date=c.date,
                title=c.title,
                paths=tuple(
                    dict.fromkeys(
                        [f.path for f in c.files] + [f.old_path for f in c.files if f.old_path]
                    )
                ),
                renames=tuple((f.old_path, f.path) for f in c.files if f.old_path),
                families=tuple(c.families),
                categories=tuple(c.categories),
                nfiles=len(c.files),
                reverts=c.reverts,
                sha=c.sha,
                reverted_by=tuple(c.reverted_by),
            )
        except CardProblems:
            facts = None
        _FACTS_CACHE[key] = (st.st_mtime_ns, st.st_size, facts)
        if facts is not None:
            out.append(facts)
    return out


def _when(date: str) -> _dt.datetime:
    d = _dt.datetime.fromisoformat(date)
    return d if d.tzinfo else d.replace(tzinfo=_dt.UTC)


def latest_touch(root: Path, repo: str, globs: list[str]) -> str | None:
    """ISO date of the newest card in pr_archive/<repo>/ touching a path that matches any glob
    (`*` within a segment, `**` across segments, a directory matches what is under it); None if
    none.
    """
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
    if not p.exists():
        return {}
    try:
        return dict(json.loads(p.read_text(encoding="utf-8")).get("families") or {})
    except ValueError:
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
