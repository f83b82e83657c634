"""The text of a PR card rendered from its schema.PRCard: the front-matter (front_matter.py) and
the generated body sections, with the Notes kept from the card it replaces (the layout:
card_format.py).
"""

from __future__ import annotations

from typing import Any

from kbase.ingest.front_matter import dump_meta

from kbase.schema import PRCard

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
        files.append(fd)
    d["files"] = files
    d["totals"] = dict(card.totals)
    d["categories"] = list(card.categories)
    if card.reverts is not None:
        d["reverts"] = card.reverts
    tags = {k: v for k, v in card.tags.model_dump().items() if v}
    d["tags"] = tags
    for key in ("reverts_commit", "description", "key_diff"):
        if getattr(card, key):
            d[key] = getattr(card, key)
    for key in ("reverted_by", "co_authors", "issues", "numbers", "touched", "also"):
        if getattr(card, key):
            d[key] = list(getattr(card, key))
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
        parts.append(
            "It was reverted by " + ", ".join(_ref_words(r) for r in card.reverted_by) + "."
        )
    tg = card.tags
    if tg.kernel_types:
        parts.append("Kernel types: " + ", ".join(tg.kernel_types) + ".")
    if tg.languages:
        parts.append("Languages: " + ", ".join(tg.languages) + ".")
    if tg.archs:
        parts.append("Architectures: " + ", ".join(tg.archs) + ".")
    if tg.techniques:
        parts.append("Techniques: " + ", ".join(tg.techniques) + ".")
    renamed = [f for f in card.files if f.old_path]
    if renamed:
        parts.append(
            "Renames: "
            + "; ".join(f"{f.old_path} -> {f.path}" for f in renamed[:5])
            + (f" and {len(renamed) - 5} more" if len(renamed) > 5 else "")
            + "."
        )
    biggest = sorted(card.files, key=lambda f: -((f.added or 0) + (f.deleted or 0)))[:3]
    if biggest:
        parts.append("Largest changes: " + ", ".join(f.path for f in biggest) + ".")
    kernels = [s for f in card.files for s in f.kernels]
    if kernels:
        parts.append("Kernels touched: " + ", ".join(dict.fromkeys(kernels)) + ".")
    if also:
        parts.append(
            "The same PR number also appears on commit"
            + ("s " if len(also) > 1 else " ")
            + ", ".join(s[:10] for s in also)
            + "."
        )
    return " ".join(parts)


def _ref_words(ref: str) -> str:
    return f"PR {ref}" if ref.startswith("#") else f"commit {ref}"


def render_card(card: PRCard, notes: str = "", also: list[str] | None = None) -> str:
    meta = dump_meta(card_meta(card))
    lines = [
        "---",
        meta.rstrip("\n"),
        "---",
        f"# {card.title}",
        "",
        "## Summary",
        "",
        summary_text(card, also),
        "",
    ]
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
    links = _links(card)
    if links:
        lines += ["## Links", ""] + [f"- {x}" for x in links] + [""]
    lines += ["## Files", ""]
    for f in card.files[:BODY_FILE_LIMIT]:
        where = f"`{f.old_path}` -> `{f.path}`" if f.old_path else f"`{f.path}`"
        delta = "binary" if f.added is None else f"+{f.added}/-{f.deleted}"
        sym = f": {', '.join(f.symbols)}" if f.symbols else ""
        lines.append(f"- {where} ({delta}){sym}")
    if len(card.files) > BODY_FILE_LIMIT:
        lines.append(
            f"- ... and {len(card.files) - BODY_FILE_LIMIT} more files "
            "(all are listed in the front-matter)"
        )
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
        out.append(
            "Issues: " + ", ".join(f"{base}/issues/{n}" if base else f"#{n}" for n in card.issues)
        )
    if card.co_authors:
        out.append("Co-authors: " + ", ".join(card.co_authors))
    if card.reverts is not None:
        out.append(f"Reverts: PR #{card.reverts}")
    elif card.reverts_commit:
        out.append(f"Reverts: commit {card.reverts_commit}")
    if card.reverted_by:
        out.append("Reverted by: " + ", ".join(_ref_words(r) for r in card.reverted_by))
    if card.numbers:
        out.append("Numbers: " + ", ".join(card.numbers))
    return out
