"""A search's ranked entries before they become hits: the candidate rows of one retriever (one
per entry, best first) and the candidates the fused ranking returns (issue #11)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from kbase.retrieval.dense import CANDIDATES
from kbase.retrieval.vector_files import first_of_each

from kbase.schema import Entry

if TYPE_CHECKING:
    from kbase.retrieval.loaded import LoadedIndex


class Candidate:
    """One ranked entry, decoded from the generation when first asked for (a search returns
    k * 4 + 20 candidates and its caller keeps k); `id` and `kind` come from the generation's
    columns."""

    __slots__ = ("score", "chunk_index", "source", "_pos", "_entry", "confidence", "matched")

    def __init__(
        self,
        entry: Entry | None = None,
        score: float = 0.0,
        chunk_index: int = 0,  # index into entry.chunks of the best-matching chunk
        source: LoadedIndex | None = None,  # the generation it came from (its chunk texts)
        pos: int = -1,  # its position in source.entries, when entry is left to decode
    ):
        if entry is None and (source is None or pos < 0):
            raise ValueError("a candidate needs its entry or its position in a generation")
        self.score = score
        self.chunk_index = chunk_index
        self.source = source
        self._pos = pos
        self._entry = entry
        self.confidence: float | None = None  # P(this entry fixes the query), fusion.confidence
        self.matched = ""  # the trigger or symptom line the query repeats most (skills)

    @property
    def entry(self) -> Entry:
        if self._entry is None:
            assert self.source is not None
            self._entry = self.source.entries[self._pos]
        return self._entry

    @property
    def position(self) -> int:
        """Its position in `source.entries` (-1 when it was made from an entry alone)."""
        if self._pos >= 0 or self.source is None:
            return self._pos
        return self.source.by_id.get(self.entry.id, -1)

    @property
    def id(self) -> str:
        if self._entry is None and self.source is not None:
            return self.source.entries.ids[self._pos]
        return self.entry.id

    @property
    def kind(self) -> str:
        if self._entry is None and self.source is not None:
            return self.source.entries.kinds[self._pos]
        return self.entry.kind


def best_per_entry(
    chunk_scores: np.ndarray, idx: LoadedIndex, chunks: np.ndarray | None
) -> list[tuple[int, int, float]]:
    """[(entry index, chunk position, score)] best first, one row per entry with score > 0;
    `chunks`: the (sorted) chunk positions a filter keeps, None for all."""
    if chunks is None:
        pos = np.flatnonzero(chunk_scores > 0)
    else:
        pos = chunks[chunk_scores[chunks] > 0]
    if pos.size == 0:
        return []
    # Sorting every matching chunk cost ~10 ms at 100k entries; the best few thousand almost
    # always hold CANDIDATES distinct entries (else sort them all).
    take = CANDIDATES * 20
    for full in (False, True):
        sel = pos
        if not full and pos.size > take:
            sel = pos[np.argpartition(-chunk_scores[pos], take - 1)[:take]]
        order = sel[np.argsort(-chunk_scores[sel], kind="stable")]
        best = order[first_of_each(idx.chunk_entry[order])[:CANDIDATES]]
        if best.size >= CANDIDATES or sel.size == pos.size:
            break
    return list(
        zip(
            idx.chunk_entry[best].tolist(),
            best.tolist(),
            chunk_scores[best].tolist(),
            strict=True,
        )
    )


def rows_scores(
    hits: list[tuple[int, int, float]], rows: dict[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """(pool row of each hit's entry, its score) as arrays, in the hits' order."""
    n = len(hits)
    return (
        np.fromiter((rows[e] for e, _, _ in hits), dtype=np.int64, count=n),
        np.fromiter((s for _, _, s in hits), dtype=np.float64, count=n),
    )
