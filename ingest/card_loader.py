"""The PR cards of an archive: where they are (pr_archive/<name>/<N>.md) and each one loaded,
validated against the schema, its folder and its file name.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path

from kbase.ingest.card_format import CardError, split_card
from kbase.ingest.files import FileProblem, display_path, read_text
from kbase.ingest.recipes import validation_problems
from pydantic import ValidationError

from kbase.errors import ProblemsError
from kbase.schema import PRCard, Problem

ARCHIVE_DIR = "pr_archive"
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
