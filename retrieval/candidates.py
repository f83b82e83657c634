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
    k * 4 + 20 candidates, its caller keeps k); `id` and `kind` come from its columns."""

    __slots__ = ("score", "chunk_index", "source", "position", "_entry", "confidence", "matched")

    def __init__(self, score: float, chunk_index: int, source: LoadedIndex, pos: int):
        self.score = score
        self.chunk_index = chunk_index  # index into entry.chunks of the best-matching chunk
        self.source = source  # the generation it came from (its chunk texts)
        self.position = pos  # its position in source.entries
        self._entry: Entry | None = None
        self.confidence: float | None = None  # P(this entry fixes the query), fusion.confidence
        self.matched = ""  # the trigger or symptom line the query repeats most (skills)

    @property
    def entry(self) -> Entry:
        if self._entry is None:
            self._entry = self.source.entries[self.position]
        return self._entry

    @property
    def id(self) -> str:
        return self.source.entries.ids[self.position]

    @property
    def kind(self) -> str:
        return self.source.entries.kinds[self.position]


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
    ents = idx.chunk_entry[best].tolist()
    return list(zip(ents, best.tolist(), chunk_scores[best].tolist(), strict=True))


def rows_scores(
    hits: list[tuple[int, int, float]], rows: dict[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """(pool row of each hit's entry, its score) as arrays, in the hits' order."""
    n = len(hits)
    return (
        np.fromiter((rows[e] for e, _, _ in hits), dtype=np.int64, count=n),
        np.fromiter((s for _, _, s in hits), dtype=np.float64, count=n),
    )
