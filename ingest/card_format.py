"""The text of a PR card: YAML front-matter (a schema.PRCard), a generated body, human Notes.

Layout of pr_archive/<name>/<N>.md (commit-<short sha>.md for a direct push, `pr: null`):

    ---
    <front-matter: repo, pr, [kind], url, sha, date, title, families, files, totals,
     categories, reverts, tags, then the optional reverts_commit, description, key_diff,
     reverted_by, co_authors, issues, numbers, touched, also>
    ---
    # <title>
    ## Summary      generated from the front-matter facts by `summary_text`
    ## Description  the cleaned commit body (PR description), when there is one
    ## Touched      ranked symbols: every kernel, then up to TOUCHED_LIMIT others
    ## Key diff     at most 20 lines of the most significant hunks
    ## Links        PR, commit, issues, co-authors, reverts, numbers
    ## Files        generated
    ## Notes        written by people; re-mining copies it over byte for byte

Each generated section is a `## ` heading followed by plain text, so `section()` reads any of
them back (retrieval indexes Summary, Description, Files and Notes).

Everything above `## Notes` belongs to the miner and is rewritten on every mine.

This module reads a card; card_render.py writes one, and front_matter.py holds the YAML shape of
the front-matter that both sides share.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kbase.ingest.card_render import render_card
from kbase.ingest.front_matter import fast_meta

from kbase.errors import KbaseError

# written by card_render.py and front_matter.py; importers of this module find them here too
__all__ = [
    "CardError",
    "CardText",
    "existing_notes",
    "fast_meta",
    "notes_text",
    "render_card",
    "section",
    "split_card",
]

_NOTES_RE = re.compile(r"^## Notes[ \t]*$", re.M)
_COMMENT_RE = re.compile(r"<!--.*?-->", re.S)


class CardError(KbaseError, ValueError):
    def __init__(self, message: str, line: int = 1, field: str | None = None):
        self.line = line
        self.field = field
        super().__init__(message)


@dataclass
class CardText:
    meta: dict[str, Any]
    yaml_text: str
    body: str
    body_line: int  # 1-based file line where the body starts
    notes: str  # the Notes section, heading included, verbatim ("" if absent)
    notes_line: int  # 1-based line of the Notes heading (0 if absent)


def split_card(text: str) -> CardText:
    """Front-matter, body and Notes of a card; CardError names the line when the layout is wrong."""
    if not text.startswith("---\n"):
        raise CardError("missing YAML front-matter: a card starts with '---'", 1)
    end = text.find("\n---\n", 3)
    if end < 0:
        if text.endswith("\n---"):
            end = len(text) - 4
        else:
            raise CardError("unterminated front-matter: no closing '---' line", 1)
    yaml_text = text[4 : end + 1]
    body_start = end + 5
    body_line = yaml_text.count("\n") + 3
    body = text[body_start:]
    meta = fast_meta(yaml_text)
    if meta is None:
        meta = _yaml_meta(yaml_text)
    if not isinstance(meta, dict):
        raise CardError("front-matter must be a YAML mapping", 2)
    m = _NOTES_RE.search(body)
    if m:
        notes = body[m.start() :]
        notes_line = body_line + body.count("\n", 0, m.start())
        body = body[: m.start()]
    else:
        notes, notes_line = "", 0
    return CardText(
        meta=meta,
        yaml_text=yaml_text,
        body=body,
        body_line=body_line,
        notes=notes,
        notes_line=notes_line,
    )


def _yaml_meta(yaml_text: str) -> Any:
    """Front-matter `fast_meta` does not read (hand-edited, not as kbase writes it), by PyYAML:
    imported only then, so a mine, which reads back only cards it wrote, never imports it.
    safe_yaml bounds depth and alias expansion and names impossible dates with their line."""
    from kbase.ingest.safe_yaml import YamlProblem, load_yaml

    try:
        return load_yaml(yaml_text, "", first_line=2)[0]
    except RecursionError:  # thousands of nested brackets: reject the card, not the index run
        raise CardError("malformed YAML: nested too deeply", 2) from None
    except YamlProblem as exc:
        first = exc.problems[0]
        raise CardError(first.message, first.line or 1, first.field) from None


def notes_text(notes_section: str) -> str:
    """What people wrote under Notes: the heading and HTML comments removed."""
    if not notes_section:
        return ""
    rest = notes_section.split("\n", 1)[1] if "\n" in notes_section else ""
    return _COMMENT_RE.sub("", rest).strip()


def existing_notes(text: str) -> str:
    """The Notes section of an existing card, verbatim, or '' — used before a card is rewritten."""
    m = _NOTES_RE.search(text)
    return text[m.start() :] if m else ""


def section(body: str, heading: str) -> tuple[str, int]:
    """Text under `## heading` up to the next `## `, and its 0-based line offset within the body."""
    m = re.search(rf"^## {re.escape(heading)}[ \t]*$", body, re.M)
    if not m:
        return "", 0
    start = m.end()
    nxt = re.search(r"^## ", body[start:], re.M)
    chunk = body[start : start + nxt.start()] if nxt else body[start:]
    return chunk.strip(), body.count("\n", 0, m.start())
