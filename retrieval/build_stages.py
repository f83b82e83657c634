"""Pieces of an index build beside the embedding loop: the BM25 build, the embedding batch size,
the vector store opened when first needed, the vectors' upserts into Chroma (grouped by
partition) and the deletion of those no entry names any more."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kbase.retrieval.chunk_ids import dense_ids
from kbase.retrieval.previous import Previous

from kbase.schema import Chunk, Entry


def embed_batch(device: str) -> int:
    """Chunks embedded per call (KBASE_EMBED_BATCH overrides). On a GPU the last batch's inserts
    are what the build waits for after the model is done, and the direct tokenizer path keeps
    a GPU busy with smaller calls: on the H200, alternating runs gave 1,024 (with 4 BM25
    workers) 3.98/4.69/4.10 s against 4,096's 5.01/4.70/4.49 s for the 6.5k-card archive."""
    import os

    env = os.environ.get("KBASE_EMBED_BATCH", "").strip()
    if env:
        return int(env)
    return 256 if device == "cpu" else 1024


def bm25_stage(
    prev: Any, prevs: Previous, entries: list[Entry], chunk_ids: list[list[str]], out: Path
) -> Callable[[], float]:
    """Build the BM25 index of `entries` (whose chunks' ids are `chunk_ids`) into `out` when the
    callable returned is called; it says how long the build took. The previous generation's
    token ids are read now, before the embedding model loads."""
    from kbase.retrieval.chunk_ids import Chunks
    from kbase.retrieval.lexical import build_bm25, load_token_cache

    cache = (
        load_token_cache(prev.path / "bm25", [e.title for e in prevs.entries])
        if prev is not None
        else None
    )
    if cache is None:  # else it holds every chunk of the entries taken over from prev
        prevs.fill(entries)
    counts = [len(ids) for ids in chunk_ids]

    def build() -> float:
        t = time.perf_counter()
        build_bm25(
            Chunks(entries, counts),
            [e.title for e, n in zip(entries, counts, strict=True) for _ in range(n)],
            out,
            cache=cache,
            entry_titles=[e.title for e in entries],
            ids=[i for ids in chunk_ids for i in ids],
        )
        return time.perf_counter() - t

    return build


def chroma_metadata(entry: Entry) -> dict:
    md: dict[str, Any] = {"kind": entry.kind, "entry_id": entry.id, "repo": entry.repo or ""}
    for t in entry.tags:
        md[f"t:{t}"] = True
    return md


def upsert_pairs(
    store: Callable[[], Any],
    pairs: list[tuple[Entry, Chunk]],
    vecs: Any,
    with_metadata: bool,
) -> None:
    """Vectors of (entry, chunk) pairs into the store, grouped by partition. `with_metadata`: a
    Chroma server gets each chunk's kind, entry, section and tags, which its filtered queries
    ask for (`where`); the embedded store gets none, since its reader filters with the index's
    own columns and the generation's vector files (dense.py). Metadata was half the wall time
    of an embedded insert (H200, 4,500 vectors: 1.4-1.7 s with tags, 0.7-0.8 s without)."""
    from kbase.retrieval.vectors import partition_key

    groups: dict[str, list[int]] = {}
    for j, (e, _) in enumerate(pairs):
        groups.setdefault(partition_key(e.kind, e.repo), []).append(j)
    for key, rows in groups.items():
        store().upsert(
            key,
            [pairs[j][1].id for j in rows],
            [vecs[j] for j in rows],
            [{**chroma_metadata(pairs[j][0]), "section": pairs[j][1].section} for j in rows]
            if with_metadata
            else None,
        )


class LazyStore:
    """The vector store, opened when first called for (a no-op re-index never opens Chroma)."""

    def __init__(self, home: Path, chroma_url: str | None):
        self.home, self.chroma_url = home, chroma_url
        self.opened: Any = None

    def __call__(self) -> Any:
        if self.opened is None:
            from kbase.retrieval.vectors import VectorStore

            self.opened = VectorStore(self.home, self.chroma_url)
        return self.opened

    def close(self) -> None:
        if self.opened is not None:
            self.opened.close()


def delete_stale(prevs: Previous, keep: set[str], store: Callable[[], Any]) -> None:
    """Delete from the store the previous generation's vectors that no entry names now."""
    from kbase.retrieval.vectors import partition_key

    stale: dict[str, set[str]] = {}
    for e in prevs.entries:
        for cid in dense_ids(e):
            if cid not in keep:
                stale.setdefault(partition_key(e.kind, e.repo), set()).add(cid)
    for key, gone in stale.items():
        store().delete(key, gone)
