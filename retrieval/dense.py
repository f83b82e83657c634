"""The dense retriever's plan for one query: which partitions are scored from the vector files and
which are asked of Chroma, for how many hits (docs/architecture.md). Each is asked for its own
filtered share: one share for all over-asked the large ones, and a kNN with k in the thousands was
most of a tag-filtered query at 100k entries (issue #11)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from kbase.retrieval.loaded import LoadedIndex
from kbase.retrieval.vector_files import top_entries

CANDIDATES = 100  # per retriever, entry level
DENSE_PER_PARTITION = 150  # chunk hits asked of each Chroma collection
# A partition of at most this many vectors is scored from the generation's vector file with one
# matrix product (exact, ~1 ms per 10k rows here) instead of Chroma's HNSW index; larger ones go
# to Chroma. Embedded store only: with a Chroma server the server answers.
LOCAL_MAX_ROWS = 20_000
# The rows a filter keeps of a larger partition are gathered and scored exactly when at most
# this many (~1 ms): exact, and cheaper than a kNN over-asked to survive the filter.
LOCAL_MASKED_ROWS = 8_000
# A filter keeping at least this share of a partition's entries is applied to Chroma's hits
# afterwards (asking for proportionally more). The rows a rarer filter keeps are scored exactly
# (embedded store), or its tags become a Chroma `where` (a server, whose chunks carry them).
MIN_POST_FILTER_SHARE = 0.1
MAX_ASK = 10 * DENSE_PER_PARTITION

Hit = tuple[int, int, float]  # (entry index, chunk position or -1, cosine)


@dataclass
class DensePlan:
    # (partition, rows to score or None for all of them) scored from the vector files
    local: list[tuple[str, np.ndarray | None]] = field(default_factory=list)
    # (partition, hits to ask, Chroma where) asked of the vector store
    asks: list[tuple[str, int, dict | None]] = field(default_factory=list)


def plan_dense(
    idx: LoadedIndex,
    kind: str | None,
    repo: str | None,
    tags: list[str] | None,
    mask: np.ndarray | None,
    local_vectors: bool = True,
) -> DensePlan:
    keys = idx.partitions_for(kind, repo)
    counts = idx.masked_counts(mask) if mask is not None else None
    if counts is not None:
        keys = [k for k in keys if counts.get(k)]
    out = DensePlan()
    vecs = idx.vectors
    for k in keys:
        share = 1.0
        if counts is not None:
            share = counts.get(k, 0) / max(1, idx.partition_sizes.get(k, 0))
        if local_vectors and k in vecs.parts:
            if vecs.rows(k) <= LOCAL_MAX_ROWS:
                out.local.append((k, None))
                continue
            if mask is not None:
                rows = idx.masked_rows(k, mask)
                # A filter keeping few rows is scored exactly, whatever their number: the
                # embedded store holds no metadata to filter by (build_stages.upsert_pairs)
                if rows.size <= LOCAL_MASKED_ROWS or share < MIN_POST_FILTER_SHARE:
                    out.local.append((k, rows))
                    continue
        n, where = DENSE_PER_PARTITION, None
        if counts is not None:
            if share >= MIN_POST_FILTER_SHARE:
                n = int(min(DENSE_PER_PARTITION / share, MAX_ASK))
            elif tags and not local_vectors:
                # tags as a Chroma `where`; the mask still checks kind, repo and dates
                conds: list[dict] = [{f"t:{t}": True} for t in tags]
                where = conds[0] if len(conds) == 1 else {"$and": conds}
            else:
                n = MAX_ASK
        out.asks.append((k, n, where))
    return out


def score_local(
    idx: LoadedIndex, vec: np.ndarray, local: list[tuple[str, np.ndarray | None]], mask
) -> list[Hit]:
    """Exact cosine over the planned rows of the vector files; the mask applied exactly."""
    parts = []
    for k, rows in local:
        m, pos = idx.vectors.matrix(k), idx.row_chunks(k)
        parts.append((m, pos) if rows is None else (np.asarray(m[rows]), pos[rows]))
    return top_entries(parts, vec, idx.chunk_entry, mask, CANDIDATES)


def store_hits(idx: LoadedIndex, rows: list[tuple[str, float]], mask) -> list[Hit]:
    """Chroma's (chunk id, similarity) rows, best first, as one hit per entry in the mask."""
    out: list[Hit] = []
    seen: set[int] = set()
    for cid, sim in rows:
        p = idx.chunk_ids.get(cid)
        if p is not None:
            e = int(idx.chunk_entry[p])
        else:
            # A vector from a newer/older generation of the same entry: credit the entry.
            found = idx.by_id.get(cid.split("::", 1)[0])
            if found is None:
                continue
            e, p = found, -1
        if e not in seen and (mask is None or mask[e]):
            seen.add(e)
            out.append((e, p, sim))
            if len(out) >= CANDIDATES:
                break
    return out


def merge(a: list[Hit], b: list[Hit]) -> list[Hit]:
    """Two best-first hit lists over disjoint partitions as one, at most CANDIDATES."""
    if not a or not b:
        return (a or b)[:CANDIDATES]
    return sorted(a + b, key=lambda r: -r[2])[:CANDIDATES]
