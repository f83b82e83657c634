"""What the indexer makes of a file: entries (a skill or a PR card) and their chunks, and the
fenced code blocks of a parsed Markdown body."""

from __future__ import annotations

from pydantic import Field

from kbase.closed_sets import EntryKind
from kbase.schema.base import Model


class CodeBlock(Model):
    info: str
    lang: str
    code: str
    line: int = Field(description="1-based line of the opening fence in the .md file")


class Chunk(Model):
    """One retrievable piece of an entry, pointing back to file and line."""

    id: str
    entry_id: str
    kind: EntryKind
    section: str
    # empty in a searcher's light copy of a generation until a hit needs it (retrieval/texts)
    text: str = ""
    line: int
    path: str

    @classmethod
    def add(
        cls,
        chunks: list[Chunk],
        entry: str,
        kind: EntryKind,
        path: str,
        section: str,
        text: str,
        line: int,
    ) -> None:
        """Append an entry's next chunk (ids number them in order), unless `text` is blank."""
        if text.strip():
            chunks.append(
                cls(
                    id=f"{entry}::{len(chunks)}",
                    entry_id=entry,
                    kind=kind,
                    section=section,
                    text=text.strip(),
                    line=line,
                    path=path,
                )
            )


class Entry(Model):
    """A skill or a PR card, as indexed."""

    id: str
    kind: EntryKind
    title: str
    path: str
    line: int = 1
    content_hash: str
    chunks: list[Chunk]
    tags: list[str] = Field(default_factory=list, description="flat key=value tags")
    repo: str | None = None
    pr: int | None = None
    date: str | None = None
    families: list[str] = Field(default_factory=list)
    categories: list[str] = Field(default_factory=list)
