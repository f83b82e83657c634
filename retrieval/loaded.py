"""One index generation held in memory for searching (entries, chunk arrays for filtering,
BM25, the generation's vector files and its title tokens), and the candidate rows its retrievers
return: BM25's best chunk per entry, the dense plan, and the candidates of the fused ranking."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from kbase.retrieval.generations import EntryTable
from kbase.retrieval.lexical import Lexical, read_title_ids
from kbase.retrieval.vectors import GenVectors, first_of_each, partition_key, top_entries

from kbase.schema import Entry


class LoadedIndex:
    def __init__(self, home: Path, gen):
        """`gen`: a generation loaded lazy (its entries an EntryTable)."""
        self.entries: EntryTable = gen.entries
        self._texts = gen.texts
        table = self.entries
        self.by_id = {eid: i for i, eid in enumerate(table.ids)}
        counts = np.fromiter(map(len, table.chunk_ids), dtype=np.int64, count=len(table))
        self.chunk_entry = np.repeat(np.arange(len(table), dtype=np.int64), counts)
        self.chunk_start = starts = np.cumsum(counts) - counts  # each entry's first chunk
        self.evidence: object = None  # retrieval.fusion.State, made by its first search
        n = len(self.chunk_entry)
        self.chunk_local = np.arange(n, dtype=np.int64) - np.repeat(starts, counts)
        flat = [cid for ids in table.chunk_ids for cid in ids]
        self.chunk_ids: dict[str, int] = dict(zip(flat, range(len(flat)), strict=True))
        self.kind = np.asarray(table.kinds)
        self.repo = np.asarray([r or "" for r in table.repos])
        self.path = gen.path
        self.lexical = Lexical(gen.path / "bm25")
        keys: dict[tuple[str, str | None], str] = {}  # a few (kind, repo) pairs, many entries
        self.entry_partition = [
            keys.get(p) or keys.setdefault(p, partition_key(*p))
            for p in zip(table.kinds, table.repos, strict=True)
        ]
        self.partitions = sorted(set(self.entry_partition))
        pnum = {k: i for i, k in enumerate(self.partitions)}
        self.entry_part_no = np.asarray([pnum[k] for k in self.entry_partition], dtype=np.int64)
        self.partition_sizes: dict[str, int] = dict(Counter(self.entry_partition))
        got = read_title_ids(gen.path / "bm25")
        if got is None or len(got[1]) != len(self.entries) + 1:
            raise ValueError(f"{gen.path}: the BM25 title ids are missing or do not match")
        self.title_ids = got  # (flat vocabulary ids, offsets) of every entry's title
        self._tag_sets: dict[tuple[str, ...], frozenset[str]] = {}
        self.vectors = GenVectors(gen.path)
        self._row_chunk: dict[str, np.ndarray] = {}
        self._row_entry: dict[str, np.ndarray] = {}
        self._tag_masks: dict[str, np.ndarray] = {}  # read-only: callers AND them into a fresh mask

    def fill_texts(self, entries: list[Entry]) -> None:
        """Chunk texts for these entries (a generation is loaded without them)."""
        self._texts.fill([(self.by_id[e.id], e) for e in entries if e.id in self.by_id])

    def row_chunks(self, key: str) -> np.ndarray:
        """Chunk position (into chunk_entry) of each row of partition key's vector file."""
        if key not in self._row_chunk:
            ids, pos = self.vectors.ids(key), self.chunk_ids
            rows = (pos.get(cid, -1) for cid in ids)
            self._row_chunk[key] = np.fromiter(rows, dtype=np.int64, count=len(ids))
        return self._row_chunk[key]

    def row_entries(self, key: str) -> np.ndarray:
        """Entry index of each row of partition key's vector file (-1: unknown)."""
        if key not in self._row_entry:
            pos = self.row_chunks(key)
            self._row_entry[key] = np.where(pos >= 0, self.chunk_entry[np.maximum(pos, 0)], -1)
        return self._row_entry[key]

    def masked_counts(self, mask: np.ndarray) -> dict[str, int]:
        """Partition -> how many of its entries the mask keeps."""
        counts = np.bincount(self.entry_part_no[mask], minlength=len(self.partitions))
        return {self.partitions[i]: int(counts[i]) for i in np.nonzero(counts)[0]}

    def masked_chunks(self, mask: np.ndarray) -> np.ndarray:
        """Chunk positions (sorted) whose entry the mask keeps: BM25 looks at their scores
        only, not at every chunk of the index."""
        return np.flatnonzero(mask[self.chunk_entry])

    def masked_rows(self, key: str, mask: np.ndarray) -> np.ndarray:
        """Rows of partition key's vector file whose entry the mask keeps."""
        ent = self.row_entries(key)
        return np.flatnonzero(mask[np.maximum(ent, 0)] & (ent >= 0))

    def tag_mask(self, tag: str) -> np.ndarray:
        """Entries carrying tag, once per generation and tag: the scan of every entry's tags is
        a Python loop, 5-10 ms a query at 100k entries against issue #11's 25 ms p50 there."""
        got = self._tag_masks.get(tag)
        if got is None:
            if len(self._tag_masks) > 256:  # a server's many filters: start again
                self._tag_masks.clear()
            has = (tag in tags for tags in self.entries.tags)
            got = self._tag_masks[tag] = np.fromiter(has, dtype=bool, count=len(self.entries))
        return got

    def tags_with_keys(self, keys: tuple[str, ...]) -> frozenset[str]:
        """Every `key=value` tag of the index whose key is in keys; computed once per generation
        (the façade checks filter names against it on every filtered search)."""
        if keys not in self._tag_sets:
            every = (t for tags in self.entries.tags for t in tags)
            self._tag_sets[keys] = frozenset(t for t in every if t.split("=", 1)[0] in keys)
        return self._tag_sets[keys]

    def title_overlap(self, rows: list[int], words: set[str]) -> np.ndarray:
        """For each entry in rows, how many of these tokens its title has, from the title ids
        written at index time (vectorised)."""
        vocab = self.lexical.vocab
        # sorted() rather than np.unique: its masked-array check imports numpy.ma (~15 ms cold)
        qids = np.asarray(sorted({vocab[t] for t in words if t in vocab}), dtype=np.int32)
        flat, off = self.title_ids
        r = np.asarray(rows, dtype=np.int64)
        starts, lengths = off[r], off[r + 1] - off[r]
        total = int(lengths.sum())
        if total == 0 or qids.size == 0:
            return np.zeros(len(rows), dtype=np.float64)
        # the positions in flat of every row's ids, row after row
        shift = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
        hit = np.isin(flat[shift + np.arange(total)], qids)
        return np.bincount(
            np.repeat(np.arange(len(rows)), lengths), weights=hit, minlength=len(rows)
        )

    def partitions_for(self, kind: str | None, repo: str | None) -> list[str]:
        if repo:
            return [partition_key("pr", repo)] if kind in (None, "pr") else []
        if kind:
            return [p for p in self.partitions if p == kind or p.startswith(f"{kind}--")]
        return list(self.partitions)

    def entry_mask(
        self,
        kind: str | None,
        repo: str | None,
        tags: list[str] | None,
        since: str | None = None,
        until: str | None = None,
    ) -> np.ndarray | None:
        if not (kind or repo or tags or since or until):
            return None
        mask = np.ones(len(self.entries), dtype=bool)
        if kind:
            mask &= self.kind == kind
        if repo:
            mask &= self.repo == repo
        for t in tags or []:
            mask &= self.tag_mask(t)
        if since or until:
            # ISO dates compare as strings on their YYYY-MM-DD prefix; undated entries drop out
            days = [(d or "")[:10] for d in self.entries.dates]
            keep = (
                bool(d) and (not since or d >= since) and (not until or d <= until) for d in days
            )
            mask &= np.fromiter(keep, dtype=bool, count=len(days))
        return mask


# ----------------------------------------------------------------------------- the dense plan
# Which partitions are scored from the vector files and which are asked of Chroma, for how many
# hits (docs/architecture.md): each for its own filtered share, as one share for all over-asked
# the large ones (a kNN with k in the thousands: most of a tag-filtered query at 100k entries).
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


# ----------------------------------------------------------------------------- candidates
# A search's ranked entries before they become hits (issue #11).
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
