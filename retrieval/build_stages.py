"""Pieces of an index build beside the embedding loop: the BM25 build (build_bm25 writes the
index that retrieval/lexical.py reads), the vector store opened when first needed, the vectors'
upserts into Chroma (grouped by partition) and the deletion of those no entry names any more."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from kbase.retrieval import lexical as L
from kbase.retrieval.previous import Carried, Previous, dense_ids
from kbase.retrieval.vectors import VectorStore, partition_key

from kbase.schema import Chunk, Entry


def bm25_stage(
    prev: Any, prevs: Previous, entries: list[Entry], chunk_ids: list[list[str]], out: Path
) -> Callable[[], float]:
    """Build the BM25 index of `entries` (whose chunks' ids are `chunk_ids`) into `out` when the
    callable returned is called; it says how long the build took. The previous generation's
    token ids are read now, before the embedding model loads."""
    titles = [e.title for e in prevs.entries]
    cache = L.load_token_cache(prev.path / "bm25", titles) if prev is not None else None
    if cache is None:  # else it holds every chunk of the entries taken over from prev
        swap = prevs.decoded(entries)
        entries = [swap.get(id(e), e) for e in entries]
        prevs.fill(entries)
    counts = [len(ids) for ids in chunk_ids]
    # the chunks to tokenize: those of entries carried over undecoded are in the cache (their
    # ids stand in)
    chunks = [c for e in entries for c in (e.chunk_ids if isinstance(e, Carried) else e.chunks)]

    def build() -> float:
        t = time.perf_counter()
        build_bm25(
            chunks,
            [e.title for e, n in zip(entries, counts, strict=True) for _ in range(n)],
            out,
            cache=cache,
            entry_titles=[e.title for e in entries],
            ids=[i for ids in chunk_ids for i in ids],
        )
        return time.perf_counter() - t

    return build


def upsert_pairs(
    store: Callable[[], Any],
    pairs: list[tuple[Entry, Chunk]],
    vecs: Any,
    with_metadata: bool,
) -> None:
    """Vectors of (entry, chunk) pairs into the store, grouped by partition. `with_metadata`: a
    Chroma server gets each chunk's kind, entry, section and tags for its `where` filters; the
    embedded store's reader filters with the index's own columns (dense.py), and metadata was
    half the time of an embedded insert."""
    groups: dict[str, list[int]] = {}
    for j, (e, _) in enumerate(pairs):
        groups.setdefault(partition_key(e.kind, e.repo), []).append(j)
    for key, rows in groups.items():
        store().upsert(
            key,
            [pairs[j][1].id for j in rows],
            [vecs[j] for j in rows],
            [_metadata(*pairs[j]) for j in rows] if with_metadata else None,
        )


def _metadata(e: Entry, chunk: Chunk) -> dict[str, Any]:
    head = {"kind": e.kind, "entry_id": e.id, "repo": e.repo or ""}
    return {**head, **{f"t:{t}": True for t in e.tags}, "section": chunk.section}


class LazyStore:
    """The vector store, opened when first called for (a no-op re-index never opens Chroma)."""

    def __init__(self, home: Path, chroma_url: str | None):
        self.home, self.chroma_url = home, chroma_url
        self.opened: Any = None

    def __call__(self) -> Any:
        if self.opened is None:
            self.opened = VectorStore(self.home, self.chroma_url)
        return self.opened

    def close(self) -> None:
        if self.opened is not None:
            self.opened.close()


def delete_stale(prevs: Previous, keep: set[str], store: Callable[[], Any]) -> None:
    """Delete from the store the previous generation's vectors that no entry names now."""
    stale: dict[str, set[str]] = {}
    for e in prevs.entries:
        for cid in dense_ids(e):
            if cid not in keep:
                stale.setdefault(partition_key(e.kind, e.repo), set()).add(cid)
    for key, gone in stale.items():
        store().delete(key, gone)


def _write_title_ids(
    path: Path, titles: list[str], known: Mapping[str, np.ndarray], vocab: dict[str, int]
) -> None:
    """Every entry's title as vocabulary ids (read_title_ids), end to end with offsets; a title
    the cache knows is not tokenized again."""
    done: dict[str, np.ndarray] = {}
    for t in titles:
        if t not in done:
            done[t] = known[t] if t in known else L.title_ids(t, vocab)
    tparts = [done[t] for t in titles]
    toff = np.zeros(len(tparts) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in tparts], out=toff[1:])
    tflat = np.concatenate(tparts) if tparts else np.zeros(0, dtype=np.int32)
    np.save(path / L.TITLE_TOKENS_FILE, tflat.astype(np.int32, copy=False))
    np.save(path / L.TITLE_OFFSETS_FILE, toff)


def build_bm25(
    chunks: Sequence[Chunk],
    titles: list[str],
    path: Path,
    cache: L.TokenCache | None = None,
    entry_titles: list[str] | None = None,
    ids: list[str] | None = None,
) -> None:
    """Write the eager BM25 index of the chunks (Lucene variant: the score of token t in chunk
    d is idf(t) * tf / (tf + k1 * (1 - b + b * |d| / avgdl)), idf = ln(1 + (N - df + .5) /
    (df + .5))) as a CSC matrix in bm25s's file layout, plus the token ids for the next run.
    Only chunks the cache lacks are tokenized; the rest is numpy. `entry_titles`: every entry's
    title, in entry order, whose ids are written too (read_title_ids). `ids`: the chunks' ids,
    given when `chunks` makes each chunk on access (only those the cache lacks are read)."""
    path.mkdir(parents=True, exist_ok=True)
    vocab: dict[str, int] = dict(cache.vocab) if cache is not None else {}
    ids = ids if ids is not None else [c.id for c in chunks]
    row = cache.row if cache is not None else {}
    rows = np.fromiter((row.get(i, -1) for i in ids), dtype=np.int64, count=len(ids))
    fresh = _tokenized(chunks, titles, np.flatnonzero(rows < 0).tolist(), vocab)
    if entry_titles is not None:
        _write_title_ids(path, entry_titles, cache.titles if cache is not None else {}, vocab)
    if not ids:  # an empty index still loads and answers nothing
        ids = ["<empty>"]
        rows = np.full(1, -1, dtype=np.int64)
        fresh = {0: np.asarray([vocab.setdefault("<empty>", len(vocab))], dtype=np.int32)}
    if cache is not None:
        flat, lengths = L.gather(rows, cache.flat, cache.off, fresh)
    else:
        flat, lengths = L.gather(rows, np.zeros(0, np.int32), np.zeros(1, np.int64), fresh)
    n, v = len(ids), max(len(vocab), 1)
    pair, tf = L.all_pairs(flat, lengths)  # token-major
    tok, d = pair // n, pair % n
    df = np.bincount(tok, minlength=v)
    idf = np.log(1.0 + (n - df + 0.5) / (df + 0.5))
    norm = L.K1 * ((1.0 - L.B) + L.B * lengths / lengths.mean())
    tf = tf.astype(np.float64)
    scores = (idf[tok] * tf / (norm[d] + tf)).astype(np.float32)
    indptr = np.zeros(v + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    np.save(path / "data.csc.index.npy", scores)
    np.save(path / "indices.csc.index.npy", d.astype(np.int32))
    np.save(path / "indptr.csc.index.npy", indptr)
    # the cached vocabulary plus tokens appended in order: a token keeps its id across builds
    (path / "vocab.index.json").write_text(json.dumps(vocab), "ascii")
    # what lexical.Lexical reads (every kbase that reads this generation format reads BM25 with
    # numpy, not bm25s); the tokenizer fingerprint goes in its own file
    params = {"k1": L.K1, "b": L.B, "method": "lucene", "dtype": "float32", "num_docs": n}
    (path / "params.index.json").write_text(json.dumps(params, indent=1), "utf-8")
    (path / L.TOKENIZER_FILE).write_text(L.tokenizer_fingerprint(), "utf-8")
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    np.save(path / L.TOKENS_FILE, flat)
    np.save(path / L.OFFSETS_FILE, offsets)
    (path / L.IDS_FILE).write_text("\n".join(i.replace("\n", " ") for i in ids), "utf-8")


def _tokenized(
    chunks: Sequence[Chunk], titles: list[str], todo: list[int], vocab: dict[str, int]
) -> dict[int, np.ndarray]:
    """The token ids of chunks `todo` (new tokens added to `vocab`); a repeated text once."""
    fresh: dict[int, np.ndarray] = {}
    same_text: dict[tuple[str, str], np.ndarray] = {}
    for j in todo:
        key = (titles[j], chunks[j].text)
        got = same_text.get(key)
        if got is None:
            toks = L.text_tokens(*key)
            got = np.fromiter(
                (vocab.setdefault(x, len(vocab)) for x in toks), dtype=np.int32, count=len(toks)
            )
            same_text[key] = got
        fresh[j] = got
    return fresh
