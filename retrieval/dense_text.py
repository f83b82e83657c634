"""The text the embedding model sees for a chunk (docs/architecture.md): the repeated title and
headers, hashes, counts and paths were about half of a PR card's word pieces (issue #11), and
attention cost grows with length. RECIPE is part of every PR vector id (indexer._vector_id):
changing it re-embeds each card once."""

from __future__ import annotations

import re

from kbase.schema import Chunk, Entry

RECIPE = "pr2"  # bump whenever dense_text's output for a PR chunk changes
# Sentences of the summary paragraph (ingest/card_format.summary_text) that repeat the head lines
# or are hashes, counts and paths: matched by how they start.
_DROP = (
    "PR #",
    "Commit ",
    "It changes ",
    "Families: ",
    "Categories: ",
    "Kernel types: ",
    "Renames: ",
    "Largest changes: ",
    "The same PR number also appears",
)
_SENTENCE = re.compile(r"(?<=\.)\s+(?=[A-Z])")


def _summary(entry: Entry, text: str) -> str:
    lines = text.split("\n")
    if lines and lines[0].strip() == entry.title.strip():
        lines = lines[1:]  # the title is prepended anyway
    out: list[str] = []
    para = False  # the head lines come first, then summary_text's paragraph
    for line in lines:
        para = para or line.startswith(("PR #", "Commit "))
        if not para:
            out.append(line)
            continue
        kept = [s for s in _SENTENCE.split(line) if not s.startswith(_DROP)]
        if kept:
            out.append(" ".join(kept))
    return "\n".join(out)


def _strip_header(entry: Entry, text: str) -> str:
    """'Description of repo PR #N (title):\\nbody' -> 'body' (the title is prepended anyway)."""
    first, sep, rest = text.partition("\n")
    if sep and first.endswith(f"({entry.title}):"):
        return rest
    return text


def dense_text(entry: Entry, chunk: Chunk) -> str:
    if entry.kind != "pr":
        return f"{entry.title}\n{chunk.text}"
    if chunk.section == "summary":
        body = _summary(entry, chunk.text)
    else:
        body = _strip_header(entry, chunk.text)
    return f"{entry.title}\n{body}"
