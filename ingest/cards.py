"""The PR cards of an archive (pr_archive/<name>/<N>.md): found, each loaded and validated against
the schema, its folder and its file name, and made an index entry (kind "pr"). Staleness and
timelines read the archive through card_history.py."""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from kbase.ingest.card_format import CardError, CardText, notes_text, section, split_card
from kbase.ingest.files import read_checked
from pydantic import ValidationError

from kbase.errors import ProblemsError
from kbase.schema import Chunk, Entry, PRCard, Problem

ARCHIVE_DIR = "pr_archive"
_SKIP_DIRS = {"recipes"}


def card_paths(root: Path, repo: str | None = None) -> list[str]:
    """pr_archive/<name>/<N>.md for every archive (or one), skipping recipes/ and README files;
    as strings: a re-index lists thousands, and Path objects were a tenth of it."""
    base = root / ARCHIVE_DIR
    if not base.is_dir():
        return []
    out: list[str] = []
    for d in [base / repo] if repo else sorted(base.iterdir()):
        if not d.is_dir() or not repo and (d.name in _SKIP_DIRS or d.name.startswith(".")):
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


@dataclass
class LoadedCard:
    card: PRCard
    path: str
    text: str
    parts: CardText


def load_card(path: Path, root: Path) -> LoadedCard:
    """One card, validated. Raises CardProblems naming file, line and field."""
    shown, text = read_checked(path, root, CardProblems)
    try:
        parts = split_card(text)
    except CardError as ce:
        raise _problem(shown, ce.line, ce.field, str(ce)) from None
    try:
        card = PRCard.model_validate(parts.meta)
    except ValidationError as exc:
        import yaml
        from kbase.ingest.markdown import validation_problems

        try:
            node = yaml.compose(parts.yaml_text, Loader=yaml.SafeLoader)
        except (yaml.YAMLError, RecursionError):
            node = None
        raise CardProblems(validation_problems(exc, shown, node, first_line=2)) from None
    folder = path.parent.name
    if card.repo != folder:
        why = f"repo {card.repo!r} does not match the archive folder {folder!r}"
        raise _problem(shown, 2, "repo", why)
    if path.stem != card_stem(card):
        what = f"pr {card.pr}" if card.pr is not None else f"commit {card.sha[:12]} (pr: null)"
        raise _problem(shown, 3, "pr", f"{what} does not match the file name {path.name!r}")
    try:
        _dt.datetime.fromisoformat(card.date)
    except ValueError:
        lines = enumerate(parts.yaml_text.split("\n"), 2)
        line = next((i for i, ln in lines if ln.startswith("date:")), 1)
        raise _problem(shown, line, "date", f"date {card.date!r} is not ISO 8601") from None
    return LoadedCard(card=card, path=shown, text=text, parts=parts)


class CardProblems(ProblemsError):
    """A PR card that does not load; `.problems` says where and why."""


def _problem(shown: str, line: int, field: str | None, message: str) -> CardProblems:
    return CardProblems([Problem(path=shown, line=line, field=field, message=message)])


FILES_PER_CHUNK = 12


def card_stem(card: PRCard) -> str:
    """File name (without .md) of a card: the PR number, or commit-<short sha> for a direct push."""
    return str(card.pr) if card.pr is not None else f"commit-{card.sha[:12]}"


def card_entry(lc: LoadedCard) -> Entry:
    c, parts = lc.card, lc.parts
    if c.pr is not None:
        eid, label = f"pr:{c.repo}#{c.pr}", f"PR #{c.pr}"
    else:  # a direct push
        eid, label = f"commit:{c.repo}@{c.sha[:12]}", f"commit {c.sha[:12]}"
    ref = f"{c.repo} {label} ({c.title})"
    chunks: list[Chunk] = []
    add = partial(Chunk.add, chunks, eid, "pr", lc.path)

    summary, s_off = section(parts.body, "Summary")
    head = [c.title, f"{c.repo} {label}, {c.date[:10]}"]
    if c.families:
        head.append("Families: " + ", ".join(c.families))
    head.append("Categories: " + ", ".join(c.categories))
    if c.tags.kernel_types:
        head.append("Kernel types: " + ", ".join(c.tags.kernel_types))
    summary_line = parts.body_line + s_off if summary else 1
    add("summary", "\n".join(head) + ("\n" + summary if summary else ""), summary_line)
    _, f_off = section(parts.body, "Files")
    lines = [
        f"{f.old_path + ' -> ' if f.old_path else ''}{f.path}"
        + (f": {', '.join(f.symbols)}" if f.symbols else "")
        for f in c.files
    ]
    # short chunks: one long list of 60 files buries each symbol under BM25 length
    # normalisation and past the embedding model's input limit
    for i in range(0, max(len(lines), 1), FILES_PER_CHUNK):
        part = "\n".join(lines[i : i + FILES_PER_CHUNK])
        add("files", f"Files changed by {ref}:\n{part}", parts.body_line + f_off if f_off else 1)
    desc, d_off = section(parts.body, "Description")
    if desc:
        add("description", f"Description of {ref}:\n{desc}", parts.body_line + d_off)
    if c.touched:
        touched = f"Kernels and functions touched by {ref}: " + ", ".join(c.touched[:60])
        add("symbols", touched, parts.body_line + section(parts.body, "Touched")[1])
    notes = notes_text(parts.notes)
    if notes:
        add("notes", f"Notes on {ref}:\n{notes}", parts.notes_line)
    groups = [f"family={f}" for f in c.families] + [f"category={x}" for x in c.categories]
    return Entry(
        id=eid,
        kind="pr",
        title=c.title,
        path=lc.path,
        line=1,
        content_hash=hashlib.sha256(lc.text.encode("utf-8")).hexdigest(),
        chunks=chunks,
        tags=c.tags.flat() + groups + [f"repo={c.repo}", f"card={c.kind}"],
        repo=c.repo,
        pr=c.pr,
        date=c.date,
        families=list(c.families),
        categories=list(c.categories),
    )
