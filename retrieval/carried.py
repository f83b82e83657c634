"""The previous generation's entries as a re-index carries them over, without decoding them
(issue #11: validating all ~6.5k entries of a mined archive into models was a second of every
incremental re-index that then changed one).

A `Carried` entry answers what the indexer asks of an unchanged entry (id, path, content hash,
kind, repo, title, tags, chunk ids and sections) from plain columns the generation stores, and
the writer copies its stored entries.jsonl line, column values and texts line as they are. Where
the whole entry is needed (its vectors must be embedded again, an edited entry's old chunk texts),
`Previous` decodes it: the same pydantic validation of the same line a full load does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kbase.retrieval import fastjson as F
from kbase.retrieval.entry_table import EntryTable

from kbase.schema import Entry

CARRY = "carry.json"  # per entry: path, content hash, chunk sections (read by the indexer only)


def carry_columns(entries: list[Any]) -> dict[str, list[Any]]:
    return {
        "paths": [e.path for e in entries],
        "hashes": [e.content_hash for e in entries],
        "sections": [
            e.sections if isinstance(e, Carried) else [c.section for c in e.chunks] for e in entries
        ],
    }


def write_carry(path: Path, cols: dict[str, list[Any]]) -> None:
    (path / CARRY).write_bytes(F.dumps(cols))


def read_carry(path: Path, n: int) -> dict[str, list[Any]] | None:
    """The carry columns of a generation of n entries; None when absent or inconsistent."""
    try:
        cols = F.loads((path / CARRY).read_bytes())
        if any(len(cols[k]) != n for k in ("paths", "hashes", "sections")):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return cols


class CarriedChunk:
    # no reference back to its entry: a cycle per entry would leave ~26k objects to the
    # cyclic garbage collector, whose passes over them were a good part of a re-index
    __slots__ = ("id", "section", "_texts", "_i", "_k")

    def __init__(self, cid: str, section: str, texts: _Texts, i: int, k: int):
        self.id = cid
        self.section = section
        self._texts = texts
        self._i = i
        self._k = k

    @property
    def text(self) -> str:
        """Read from the previous generation's texts.jsonl when first asked for."""
        return self._texts.of(self._i)[self._k]


class _Texts:
    """Chunk texts of the previous generation's entries, each entry's decoded once."""

    def __init__(self, line: Callable[[int], bytes], counts: list[int]):
        self._line = line
        self._counts = counts
        self._got: dict[int, list[str]] = {}

    def of(self, i: int) -> list[str]:
        got = self._got.get(i)
        if got is None:
            texts = json.loads(self._line(i))
            n = self._counts[i]
            got = self._got[i] = [*texts, *[""] * (n - len(texts))][:n]
        return got


class Carried:
    """One entry of the previous generation, at position i of its table, not decoded. Its chunks
    are made only when something asks for them (the indexer mostly needs their ids)."""

    __slots__ = (
        "i",
        "id",
        "kind",
        "repo",
        "title",
        "path",
        "content_hash",
        "tags",
        "chunk_ids",
        "sections",
        "_texts",
        "_chunks",
    )

    def __init__(self, table: EntryTable, cols: dict[str, list[Any]], i: int, texts: _Texts):
        self.i = i
        self.id = table.ids[i]
        self.kind = table.kinds[i]
        self.repo = table.repos[i]
        self.title = table.titles[i]
        self.tags = table.tags[i]
        self.path = cols["paths"][i]
        self.content_hash = cols["hashes"][i]
        self.chunk_ids: list[str] = table.chunk_ids[i]
        self.sections: list[str] = cols["sections"][i]
        self._texts = texts
        self._chunks: list[CarriedChunk] | None = None

    @property
    def chunks(self) -> list[CarriedChunk]:
        if self._chunks is None:
            self._chunks = [
                CarriedChunk(cid, sec, self._texts, self.i, k)
                for k, (cid, sec) in enumerate(zip(self.chunk_ids, self.sections, strict=True))
            ]
        return self._chunks

    def texts(self) -> list[str]:
        return self._texts.of(self.i)


def carried_entries(table: EntryTable, path: Path, texts_line: Any) -> list[Carried] | None:
    """Every entry of a generation as Carried, or None when it lacks the carry columns (written
    before them) or its columns disagree with its entries (then it is decoded instead).
    `texts_line(i)`: entry i's stored texts.jsonl line."""
    cols = read_carry(path, len(table))
    if cols is None or any(
        len(s) != len(c) for s, c in zip(cols["sections"], table.chunk_ids, strict=True)
    ):
        return None

    texts = _Texts(texts_line, [len(ids) for ids in table.chunk_ids])
    return [Carried(table, cols, i, texts) for i in range(len(table))]


def decode(table: EntryTable, c: Carried) -> Entry:
    """The whole entry, with its chunk texts (a fresh model: the caller may change it)."""
    e = table[c.i].model_copy(deep=True)
    for chunk, text in zip(e.chunks, c.texts(), strict=False):
        chunk.text = text
    return e
