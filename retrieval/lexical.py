"""BM25 over chunks with our code- and CJK-aware tokens, written (build_bm25, with the previous
generation's token cache) and read with numpy, in the file layout of bm25s (whose scores it
reproduces; tests/test_lexical_reader.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from kbase.retrieval.tokenize import tokens

if TYPE_CHECKING:
    from kbase.schema import Chunk


def text_tokens(title: str, text: str) -> list[str]:
    """BM25's tokens of a chunk: its entry's title, then its text."""
    return tokens(f"{title}\n{text}") or ["<empty>"]


K1, B = 1.5, 0.75  # Lucene's BM25 defaults, as bm25s uses them
TOKENS_FILE = "chunk_tokens.npy"  # every chunk's token ids, end to end
OFFSETS_FILE = "chunk_offsets.npy"
IDS_FILE = "chunk_ids.txt"
TOKENIZER_FILE = "tokenizer.txt"  # the fingerprint of the tokenizer that made the token ids
# Each entry's title as sorted unique vocabulary ids (the ranker's title feature): tokenizing the
# titles of a query's candidates cost ~7 ms a query at 20k entries (issue #11).
TITLE_TOKENS_FILE = "title_tokens.npy"
TITLE_OFFSETS_FILE = "title_offsets.npy"


def tokenizer_fingerprint() -> str:
    """Changes with the tokenizer's code or its abbreviation groups."""
    from kbase.retrieval.collect import source_digest

    return source_digest(["kbase.retrieval.tokenize"], ["abbreviations.yaml"])


class TokenCache:
    """The token ids of a previous generation's chunks, and the vocabulary they index."""

    def __init__(self, vocab: dict[str, int], ids: list[str], flat: np.ndarray, off: np.ndarray):
        self.vocab = vocab
        self.row = {cid: i for i, cid in enumerate(ids)}
        self.flat = flat
        self.off = off
        self.titles: dict[str, np.ndarray] = {}  # title -> its ids (see title_ids)


def load_token_cache(bm25_dir: Path, titles: list[str] | None = None) -> TokenCache | None:
    """The previous generation's token ids, if the tokenizer is unchanged (chunk ids carry the
    content hash, so a cached id has the same text); re-tokenizing every chunk was most of an
    incremental re-index (issue #11). `titles`: that generation's entry titles, in order."""

    try:
        fingerprint = (bm25_dir / TOKENIZER_FILE).read_text(encoding="utf-8").strip()
        if fingerprint != tokenizer_fingerprint():
            return None
        vocab = json.loads((bm25_dir / "vocab.index.json").read_bytes())
        ids = (bm25_dir / IDS_FILE).read_text(encoding="utf-8").split("\n")
        flat = np.load(bm25_dir / TOKENS_FILE)
        off = np.load(bm25_dir / OFFSETS_FILE)
    except (OSError, ValueError, KeyError):
        return None
    if len(off) != len(ids) + 1:
        return None
    cache = TokenCache(vocab, ids, flat, off)
    got = read_title_ids(bm25_dir)
    if titles is not None and got is not None and len(got[1]) == len(titles) + 1:
        tflat, toff = got
        cache.titles = {t: tflat[toff[i] : toff[i + 1]] for i, t in enumerate(titles)}
    return cache


def title_ids(title: str, vocab: dict[str, int]) -> np.ndarray:
    """Sorted unique vocabulary ids of a title's tokens (added to vocab when new)."""
    ids = {vocab.setdefault(t, len(vocab)) for t in tokens(title)}
    return np.asarray(sorted(ids), dtype=np.int32)


def read_title_ids(bm25_dir: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """(flat ids, offsets per entry) as build_bm25 wrote them; None for an index without."""
    try:
        return np.load(bm25_dir / TITLE_TOKENS_FILE), np.load(bm25_dir / TITLE_OFFSETS_FILE)
    except (OSError, ValueError):
        return None


class Lexical:
    """The BM25 index build_bm25 wrote (bm25s's file layout), read with numpy alone: importing bm25s
    pulls in scipy and tqdm, more than half a second of every cold `kbase search` (issue #11). The
    arrays are the eager BM25 score matrix in CSC form (one column of (doc, score) per token), so a
    query's scores are the column sums of its tokens, as bm25s computes them."""

    def __init__(self, path: Path):
        params = json.loads((path / "params.index.json").read_text(encoding="utf-8"))
        self.num_docs = int(params["num_docs"])
        self.dtype = np.dtype(params.get("dtype", "float32"))
        self.data = np.load(path / "data.csc.index.npy", mmap_mode="r")
        self.indices = np.load(path / "indices.csc.index.npy", mmap_mode="r")
        self.indptr = np.load(path / "indptr.csc.index.npy")
        self.vocab: dict[str, int] = json.loads((path / "vocab.index.json").read_bytes())

    def scores(self, query: str, within: tuple[int, int] | None = None) -> np.ndarray:
        """BM25 score of every chunk; `within` (lo, hi): only chunks lo <= i < hi are scored
        (the others are 0), as when a filter keeps one run of chunks (kind=skill)."""
        ids = [i for t in self.compounds(tokens(query)) if (i := self.vocab.get(t)) is not None]
        # every query token's postings at once, one bincount (a repeated token counts again,
        # as in bm25s): per-token passes over an array of every chunk cost ~7 ms at 100k entries
        spans = [(int(self.indptr[t]), int(self.indptr[t + 1])) for t in ids]
        spans = [(a, b) for a, b in spans if b > a]
        if not spans:
            return np.zeros(self.num_docs, dtype=self.dtype)
        docs = np.concatenate([self.indices[a:b] for a, b in spans])
        vals = np.concatenate([self.data[a:b] for a, b in spans])
        out = np.bincount(docs, weights=vals, minlength=self.num_docs)
        out = out.astype(self.dtype, copy=False)
        if within is not None:
            out[: within[0]] = 0
            out[within[1] :] = 0
        return out

    def idf(self, token: str) -> float:
        """The token's BM25 idf over this index's chunks (0 for a word it lacks: nothing in the
        knowledge base can be recognised by it)."""
        i = self.vocab.get(token)
        df = 0 if i is None else int(self.indptr[i + 1] - self.indptr[i])
        return 0.0 if not df else float(np.log(1.0 + (self.num_docs - df + 0.5) / (df + 0.5)))

    def compounds(self, toks: list[str]) -> list[str]:
        """Meet compound names half way, against the index vocabulary: a run-together word the
        index lacks is split into two words it has (flashmla -> flash, mla), and two neighbours
        whose concatenation it has are joined (deep gemm -> deepgemm)."""
        out = list(toks)
        vocab = self.vocab
        for t in toks:
            if t in vocab or len(t) < 6 or not t.isalpha() or not t.isascii():
                continue
            best = None
            for i in range(3, len(t) - 2):
                a, b = t[:i], t[i:]
                if a in vocab and b in vocab and (best is None or min(i, len(b)) > best[0]):
                    best = (min(i, len(b)), a, b)
            if best:
                out.extend(best[1:])
        for a, b in zip(toks, toks[1:], strict=False):
            if a.isalpha() and b.isalpha() and a + b in vocab:
                out.append(a + b)
        return out


def gather(
    rows: np.ndarray, flat: np.ndarray, off: np.ndarray, fresh: dict[int, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """(every chunk's token ids end to end, each chunk's length): chunk j's ids are the cached
    row rows[j] of (flat, off), or fresh[j] where rows[j] < 0. Runs of consecutive cached rows
    are copied as one slice."""
    n = len(rows)
    cached = rows >= 0
    lengths = np.zeros(n, dtype=np.int64)
    lengths[cached] = off[rows[cached] + 1] - off[rows[cached]]
    for j, got in fresh.items():
        lengths[j] = len(got)
    brk = np.ones(n, dtype=bool)
    brk[1:] = ~(cached[1:] & cached[:-1] & (rows[1:] == rows[:-1] + 1))
    starts = np.flatnonzero(brk).tolist()
    parts = []
    for s, e in zip(starts, [*starts[1:], n], strict=True):
        if cached[s]:
            parts.append(flat[off[rows[s]] : off[rows[e - 1] + 1]])
        else:
            parts.append(fresh[s])
    out = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    return out.astype(np.int32, copy=False), lengths


def all_pairs(flat: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pair keys token * n + chunk, sorted; term frequencies) of every chunk. One sort of every
    pair, also when re-indexing: merging the new chunks' pairs into the previous generation's
    saved 0.08-0.18 CPU s of a one-edit re-index at 6.5k entries, a median 1.27x over five
    alternating runs of bench/bench_reindex.py (#24: below the 1.3x a piece must pay)."""
    n = len(lengths)
    doc = np.repeat(np.arange(n, dtype=np.int64), lengths)
    return np.unique(flat.astype(np.int64) * n + doc, return_counts=True)


def _write_title_ids(
    path: Path, titles: list[str], known: Mapping[str, np.ndarray], vocab: dict[str, int]
) -> None:
    """Every entry's title as vocabulary ids (read_title_ids), end to end with offsets; a title
    the cache knows is not tokenized again."""
    done: dict[str, np.ndarray] = {}
    for t in titles:
        if t not in done:
            done[t] = known[t] if t in known else title_ids(t, vocab)
    tparts = [done[t] for t in titles]
    toff = np.zeros(len(tparts) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in tparts], out=toff[1:])
    tflat = np.concatenate(tparts) if tparts else np.zeros(0, dtype=np.int32)
    np.save(path / TITLE_TOKENS_FILE, tflat.astype(np.int32, copy=False))
    np.save(path / TITLE_OFFSETS_FILE, toff)


def build_bm25(
    chunks: Sequence[Chunk],
    titles: list[str],
    path: Path,
    cache: TokenCache | None = None,
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
        flat, lengths = gather(rows, cache.flat, cache.off, fresh)
    else:
        flat, lengths = gather(rows, np.zeros(0, np.int32), np.zeros(1, np.int64), fresh)
    n, v = len(ids), max(len(vocab), 1)
    pair, tf = all_pairs(flat, lengths)  # token-major
    tok, d = pair // n, pair % n
    df = np.bincount(tok, minlength=v)
    idf = np.log(1.0 + (n - df + 0.5) / (df + 0.5))
    norm = K1 * ((1.0 - B) + B * lengths / lengths.mean())
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
    params = {"k1": K1, "b": B, "method": "lucene", "dtype": "float32", "num_docs": n}
    (path / "params.index.json").write_text(json.dumps(params, indent=1), "utf-8")
    (path / TOKENIZER_FILE).write_text(tokenizer_fingerprint(), "utf-8")
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    np.save(path / TOKENS_FILE, flat)
    np.save(path / OFFSETS_FILE, offsets)
    (path / IDS_FILE).write_text("\n".join(i.replace("\n", " ") for i in ids), "utf-8")


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
            toks = text_tokens(*key)
            got = np.fromiter(
                (vocab.setdefault(x, len(vocab)) for x in toks), dtype=np.int32, count=len(toks)
            )
            same_text[key] = got
        fresh[j] = got
    return fresh
