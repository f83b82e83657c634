"""BM25 over chunks with our code- and CJK-aware tokens: read with numpy, in the file layout of
bm25s (whose scores it reproduces; tests/test_lexical_reader.py). build_stages.build_bm25 writes
it; the token cache it uses lives here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from kbase.retrieval.tokenize import tokens


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
    from kbase.code_digest import source_digest

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
    pulls in scipy and tqdm, which cost more than half a second of every cold `kbase search`
    (issue #11). The arrays are the eager BM25 score matrix in CSC form (one column of
    (doc, score) per token), so a query's scores are the column sums of its tokens, as bm25s
    computes them."""

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
        out = np.bincount(docs, weights=vals, minlength=self.num_docs).astype(
            self.dtype, copy=False
        )
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
