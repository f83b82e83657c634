"""PR cards as index entries (kind "pr"): each card's chunks (summary, files, description,
symbols, notes) and tags, for the indexer.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from kbase.ingest.card_format import notes_text, section
from kbase.ingest.card_loader import CardProblems, LoadedCard, card_files, load_card

from kbase.schema import Chunk, Entry, PRCard, Problem

FILES_PER_CHUNK = 12


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
