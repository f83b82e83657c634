"""A generation's entries as a searcher holds them (issue #11): the fields a query scans over
every entry (ids, kinds, repos, dates, tags, chunk ids, ...) as plain columns read at load, and
each whole entry decoded from its own line of entries.jsonl when something first asks for it.

Validating all 6.5k entries of a mined archive into models up front was 0.4 s of every cold
`kbase search`, which then used a few dozen of them. A decoded entry is the same model the full
load builds (the same pydantic validation of the same JSON), and stays cached.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from typing import Any, overload

from pydantic import TypeAdapter

from kbase.schema import Entry

ENTRIES = "entries.jsonl"  # one light entry (chunk texts left out) per line
COLUMNS = "columns.json"
# Column name -> how it is read off an entry (the writer's columns.json).
_COLUMNS = {
    "ids": lambda e: e.id,
    "kinds": lambda e: e.kind,
    "repos": lambda e: e.repo,
    "dates": lambda e: e.date,
    "titles": lambda e: e.title,
    "tags": lambda e: e.tags,
    "categories": lambda e: e.categories,
    "chunk_ids": lambda e: [c.id for c in e.chunks],
}


@functools.cache
def _entry_adapter() -> TypeAdapter[Entry]:
    return TypeAdapter(Entry)


@functools.cache
def _list_adapter() -> TypeAdapter[list[Entry]]:
    return TypeAdapter(list[Entry])


def columns_of(entries: Sequence[Entry]) -> dict[str, list[Any]]:
    return {name: [get(e) for e in entries] for name, get in _COLUMNS.items()}


def decode_all(data: bytes) -> list[Entry]:
    """Every entry of an entries.jsonl, validated in one pass (as one JSON array)."""
    body = data.rstrip(b"\n").replace(b"\n", b",")
    return _list_adapter().validate_json(b"[" + body + b"]")


class EntryTable(Sequence[Entry]):
    """Columns of every entry, and the entries themselves decoded on first access."""

    def __init__(self, columns: dict[str, list[Any]], data: bytes, offsets: list[int]):
        n = len(columns["ids"])
        if any(len(columns[c]) != n for c in _COLUMNS) or len(offsets) != n + 1:
            raise ValueError("entry columns and entries disagree in length")
        self.ids: list[str] = columns["ids"]
        self.kinds: list[str] = columns["kinds"]
        self.repos: list[str | None] = columns["repos"]
        self.dates: list[str | None] = columns["dates"]
        self.titles: list[str] = columns["titles"]
        self.tags: list[list[str]] = columns["tags"]
        self.categories: list[list[str]] = columns["categories"]
        self.chunk_ids: list[list[str]] = columns["chunk_ids"]
        self._data = data
        self._offsets = offsets
        # position -> entry; setdefault keeps one object per entry when threads race
        self._decoded: dict[int, Entry] = {}

    @classmethod
    def read(cls, columns: bytes, data: bytes) -> EntryTable:
        """From a generation's columns.json and entries.jsonl, as write_entries wrote them."""
        cols = json.loads(columns)
        return cls(cols, data, cols["offsets"])

    def line(self, i: int) -> bytes:
        """Entry i's stored entries.jsonl line, without its newline."""
        return self._data[self._offsets[i] : self._offsets[i + 1] - 1]

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, i: int) -> Entry: ...

    @overload
    def __getitem__(self, i: slice) -> list[Entry]: ...

    def __getitem__(self, i: int | slice) -> Entry | list[Entry]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        got = self._decoded.get(i)
        if got is None:
            if not 0 <= i < len(self):
                raise IndexError(i)
            line = self._data[self._offsets[i] : self._offsets[i + 1]]
            got = self._decoded.setdefault(i, _entry_adapter().validate_json(line))
        return got

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.all())

    def all(self) -> list[Entry]:
        """Every entry (one validation pass over the rest when most are still undecoded)."""
        if len(self._decoded) < len(self):
            fresh = decode_all(self._data)
            for i, e in enumerate(fresh):
                self._decoded.setdefault(i, e)
        return [self._decoded[i] for i in range(len(self))]
