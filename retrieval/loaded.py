"""One index generation held in memory for searching: entries, chunk arrays for filtering,
BM25, the generation's vector files and its title tokens.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
from kbase.retrieval.generations import EntryTable
from kbase.retrieval.lexical import Lexical, read_title_ids
from kbase.retrieval.vector_files import GenVectors
from kbase.retrieval.vectors import partition_key

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
        self.evidence: object = None  # retrieval.evidence.State, made by its first search
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
            got = self._tag_masks[tag] = np.fromiter(
                (tag in tags for tags in self.entries.tags), dtype=bool, count=len(self.entries)
            )
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
            mask &= np.fromiter(
                (bool(d) and (not since or d >= since) and (not until or d <= until) for d in days),
                dtype=bool,
                count=len(days),
            )
        return mask
