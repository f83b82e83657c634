"""Reading and rendering the text of a PR card: YAML front-matter (front_matter.py), a generated
body of `## ` sections that `section()` reads back, and human Notes (docs/pr-archive.md "Card
format"). Everything above `## Notes` belongs to the miner and is rewritten on every mine."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kbase.ingest.front_matter import dump_meta, fast_meta

from kbase.errors import KbaseError
from kbase.schema import PRCard

_NOTES_RE = re.compile(r"^## Notes[ \t]*$", re.M)
_COMMENT_RE = re.compile(r"<!--.*?-->", re.S)


class CardError(KbaseError, ValueError):
    def __init__(self, message: str, line: int = 1, field: str | None = None):
        self.line, self.field = line, field
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
    if end < 0 and text.endswith("\n---"):
        end = len(text) - 4
    elif end < 0:
        raise CardError("unterminated front-matter: no closing '---' line", 1)
    yaml_text = text[4 : end + 1]
    body_line = yaml_text.count("\n") + 3
    body = text[end + 5 :]
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
    return CardText(meta, yaml_text, body, body_line, notes, notes_line)


def _yaml_meta(yaml_text: str) -> Any:
    """Front-matter `fast_meta` does not read (hand-edited, not as kbase writes it), by PyYAML:
    imported only then, so a mine, which reads back only cards it wrote, never imports it.
    load_yaml bounds depth (thousands of nested brackets are a problem of the card, not a crash
    of the index run) and alias expansion and names impossible dates with their line."""
    from kbase.ingest.markdown import YamlProblem, load_yaml

    try:
        return load_yaml(yaml_text, "", first_line=2)[0]
    except YamlProblem as exc:
        first = exc.problems[0]
        raise CardError(first.message, first.line or 1, first.field) from None


def notes_text(notes_section: str) -> str:
    """What people wrote under Notes: the heading and HTML comments removed."""
    return _COMMENT_RE.sub("", notes_section.partition("\n")[2]).strip()


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


NOTES_HEADING = "## Notes"
NOTES_PLACEHOLDER = (
    "<!-- Notes: written by people, kept as they are when `kbase mine` rewrites this card. "
    "Record what the PR taught you: numbers, pitfalls, follow-ups. -->"
)
BODY_FILE_LIMIT = 60  # the body lists this many files; the front-matter always has all of them
TOUCHED_LIMIT = 30  # symbols listed in the body after every kernel; all are in the front-matter


def card_meta(card: PRCard) -> dict[str, Any]:
    """Front-matter as an ordered mapping; empty optional keys are left out to keep cards short."""
    d: dict[str, Any] = {"repo": card.repo, "pr": card.pr}
    if card.kind != "pr":
        d["kind"] = card.kind
    if card.url:
        d["url"] = card.url
    d.update(sha=card.sha, date=card.date, title=card.title, families=list(card.families))
    files = []
    for f in card.files:
        fd: dict[str, Any] = {"path": f.path}
        if f.old_path:
            fd["old_path"] = f.old_path
        fd.update(added=f.added, deleted=f.deleted, symbols=list(f.symbols))
        if f.named_by:
            fd["named_by"] = list(f.named_by)
        if f.kernels:
            fd["kernels"] = list(f.kernels)
        if f.unreadable:
            fd["unreadable"] = True
        files.append(fd)
    d.update(files=files, totals=dict(card.totals), categories=list(card.categories))
    if card.reverts is not None:
        d["reverts"] = card.reverts
    d["tags"] = {k: v for k, v in card.tags.model_dump().items() if v}
    optional = "reverts_commit description key_diff reverted_by co_authors issues numbers touched"
    d.update((k, v) for k in [*optional.split(), "also"] if (v := getattr(card, k)))
    return d


def summary_text(card: PRCard, also: list[str] | None = None) -> str:
    """One paragraph of facts in our own words; the index embeds it, so it reads as plain prose."""
    t = card.totals
    day = card.date[:10]
    if card.pr is None:
        parts = [f"Commit {card.sha[:12]} of {card.repo}, pushed on {day} without a PR."]
    else:
        parts = [f"PR #{card.pr} of {card.repo}, merged on {day} as commit {card.sha[:10]}."]
    nfiles = t.get("files", len(card.files))
    parts.append(
        f"It changes {nfiles} file{'s' if nfiles != 1 else ''} "
        f"(+{t.get('added', 0)}/-{t.get('deleted', 0)} lines"
        + (f", {t['binary']} binary" if t.get("binary") else "")
        + (f", {t['unreadable']} unreadable" if t.get("unreadable") else "")
        + ")."
    )
    if card.families:
        parts.append("Families: " + ", ".join(card.families) + ".")
    parts.append("Categories: " + ", ".join(card.categories) + ".")
    if card.reverts is not None:
        parts.append(f"It reverts PR #{card.reverts}.")
    elif card.reverts_commit:
        parts.append(f"It reverts commit {card.reverts_commit}.")
    if card.reverted_by:
        parts.append(f"It was reverted by {_ref_words(card.reverted_by)}.")
    tg = card.tags
    tag_lists = (tg.kernel_types, tg.languages, tg.archs, tg.techniques)
    for label, vals in zip(_TAG_LABELS, tag_lists, strict=True):
        if vals:
            parts.append(f"{label}: " + ", ".join(vals) + ".")
    renamed = [f for f in card.files if f.old_path]
    if renamed:
        pairs = "; ".join(f"{f.old_path} -> {f.path}" for f in renamed[:5])
        more = f" and {len(renamed) - 5} more" if len(renamed) > 5 else ""
        parts.append(f"Renames: {pairs}{more}.")
    biggest = sorted(card.files, key=lambda f: -((f.added or 0) + (f.deleted or 0)))[:3]
    if biggest:
        parts.append("Largest changes: " + ", ".join(f.path for f in biggest) + ".")
    kernels = [s for f in card.files for s in f.kernels]
    if kernels:
        parts.append("Kernels touched: " + ", ".join(dict.fromkeys(kernels)) + ".")
    if also:
        shas = ", ".join(s[:10] for s in also)
        parts.append(f"The same PR number also appears on commit{'s' * (len(also) > 1)} {shas}.")
    return " ".join(parts)


_TAG_LABELS = ("Kernel types", "Languages", "Architectures", "Techniques")


def _ref_words(refs: list[str]) -> str:
    return ", ".join(f"PR {r}" if r.startswith("#") else f"commit {r}" for r in refs)


def render_card(card: PRCard, notes: str = "", also: list[str] | None = None) -> str:
    meta = dump_meta(card_meta(card)).rstrip("\n")
    lines = ["---", meta, "---", f"# {card.title}", ""]
    lines += ["## Summary", "", summary_text(card, also), ""]
    if card.description:
        lines += ["## Description", "", card.description, ""]
    if card.touched:
        kernels = {k for f in card.files for k in f.kernels}
        shown = [s for s in card.touched if s in kernels]
        shown += [s for s in card.touched if s not in kernels][: max(0, TOUCHED_LIMIT - len(shown))]
        lines += ["## Touched", ""]
        lines += [f"- `{s}`" + (" (kernel)" if s in kernels else "") for s in shown]
        if len(card.touched) > len(shown):
            lines.append(f"- ... and {len(card.touched) - len(shown)} more (see the front-matter)")
        lines.append("")
    if card.key_diff:
        lines += ["## Key diff", "", "```diff", card.key_diff, "```", ""]
    lines += ["## Links", ""] + [f"- {x}" for x in _links(card)] + [""]  # a commit, at least
    lines += ["## Files", ""]
    for f in card.files[:BODY_FILE_LIMIT]:
        where = f"`{f.old_path}` -> `{f.path}`" if f.old_path else f"`{f.path}`"
        delta = f"+{f.added}/-{f.deleted}"
        if f.added is None:
            delta = "unreadable" if f.unreadable else "binary"
        sym = f": {', '.join(f.symbols)}" if f.symbols else ""
        lines.append(f"- {where} ({delta}){sym}")
    if len(card.files) > BODY_FILE_LIMIT:
        more = len(card.files) - BODY_FILE_LIMIT
        lines.append(f"- ... and {more} more files (all are listed in the front-matter)")
    if not card.files:
        lines.append("- (no file changes)")
    lines.append("")
    text = "\n".join(lines) + "\n"
    notes = notes if notes.strip() else f"{NOTES_HEADING}\n\n{NOTES_PLACEHOLDER}\n"
    if not notes.endswith("\n"):
        notes += "\n"
    return text + notes


def _links(card: PRCard) -> list[str]:
    base = card.url.rsplit("/pull/", 1)[0] if card.url and "/pull/" in card.url else None
    if base is None and card.url and "/commit/" in card.url:
        base = card.url.rsplit("/commit/", 1)[0]
    out: list[str] = []
    if card.pr is not None and card.url:
        out.append(f"PR: {card.url}")
    out.append(f"Commit: {base + '/commit/' + card.sha if base else card.sha}")
    if card.issues:
        issues = (f"{base}/issues/{n}" if base else f"#{n}" for n in card.issues)
        out.append("Issues: " + ", ".join(issues))
    if card.co_authors:
        out.append("Co-authors: " + ", ".join(card.co_authors))
    if card.reverts is not None:
        out.append(f"Reverts: PR #{card.reverts}")
    elif card.reverts_commit:
        out.append(f"Reverts: commit {card.reverts_commit}")
    if card.reverted_by:
        out.append(f"Reverted by: {_ref_words(card.reverted_by)}")
    if card.numbers:
        out.append("Numbers: " + ", ".join(card.numbers))
    return out
