"""Which of an entry's chunks the indexer embeds and what it asks of them, for models and for
entries carried over undecoded alike (retrieval/carried.py), and the indexer's pause of the
cyclic garbage collector."""

from __future__ import annotations

import bisect
import contextlib
import itertools
from collections.abc import Iterator, Sequence
from typing import Any, overload

from kbase.retrieval.previous import Carried

from kbase.schema import Chunk, Entry

LEXICAL_ONLY_SECTIONS = frozenset({"files", "symbols"})


def dense_chunks(entry: Entry) -> list[Chunk]:
    """The chunks that get a vector. A PR card's file lists and touched symbols are paths and
    identifiers: the embedding model splits them into meaningless word pieces, BM25 matches them
    exactly, and they were most of the embedding time (issue #11). Only a card's prose (summary,
    description, notes) is embedded."""
    if entry.kind != "pr":
        return entry.chunks
    return [c for c in entry.chunks if c.section not in LEXICAL_ONLY_SECTIONS]


def ids_of(e: Any) -> list[str]:
    """The entry's chunk ids (a Carried entry's as stored, without making its chunks)."""
    return e.chunk_ids if isinstance(e, Carried) else [c.id for c in e.chunks]


def dense_ids(e: Any) -> list[str]:
    """The ids of dense_chunks(e)."""
    if isinstance(e, Carried):
        if e.kind != "pr":
            return e.chunk_ids
        pairs = zip(e.chunk_ids, e.sections, strict=True)
        return [i for i, s in pairs if s not in LEXICAL_ONLY_SECTIONS]
    return [c.id for c in dense_chunks(e)]


class Chunks(Sequence[Any]):
    """Every chunk of the entries in order, each made when asked for (build_bm25 reads only
    those its token cache lacks)."""

    def __init__(self, entries: list[Any], counts: list[int]):
        self._entries = entries
        self._starts = list(itertools.accumulate(counts, initial=0))

    def __len__(self) -> int:
        return self._starts[-1]

    @overload
    def __getitem__(self, j: int) -> Any: ...

    @overload
    def __getitem__(self, j: slice) -> list[Any]: ...

    def __getitem__(self, j: int | slice) -> Any:
        if isinstance(j, slice):
            return [self[x] for x in range(*j.indices(len(self)))]
        if not 0 <= j < len(self):
            raise IndexError(j)
        n = bisect.bisect_right(self._starts, j) - 1
        return self._entries[n].chunks[j - self._starts[n]]


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection during a build: a re-index allocates some 100k long-lived
    containers (columns, card signatures, the carried entries), and the collector's repeated
    passes over them took 0.5-0.9 s of a one-edit re-index (issue #11). The build makes no
    reference cycles of its own; what it drops is freed by reference counting."""
    import gc

    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
