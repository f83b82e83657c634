"""The (token, chunk) pairs of a BM25 index with their term frequencies, token-major, for
retrieval/lexical.py's build_bm25; and the chunks' token ids gathered from the previous
generation's cache.

A full build sorts every (token, chunk) pair of ~2M tokens (np.unique: a few tenths of a second,
most of what a one-edit re-index spent on BM25; issue #11). An incremental one takes the previous
generation's pairs, which are already in order, renumbers their chunks, drops those of chunks
gone and merges in the pairs of the few new chunks: the same pairs in the same order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

TF_FILE = "tf.csc.index.npy"  # each pair's term frequency, beside bm25s's data/indices files


class PrevPairs:
    """A previous generation's pairs: chunk row of each (indices), where each token's pairs start
    (indptr), and their term frequencies."""

    def __init__(self, indices: np.ndarray, indptr: np.ndarray, tf: np.ndarray):
        self.indices = indices
        self.indptr = indptr
        self.tf = tf

    @classmethod
    def read(cls, bm25_dir: Path, rows: int, vocab: int) -> PrevPairs | None:
        """None when the files are missing (written before TF_FILE) or disagree."""
        try:
            indices = np.load(bm25_dir / "indices.csc.index.npy")
            indptr = np.load(bm25_dir / "indptr.csc.index.npy")
            tf = np.load(bm25_dir / TF_FILE)
        except (OSError, ValueError):
            return None
        ok = (
            len(indices) == len(tf) == (int(indptr[-1]) if len(indptr) else -1)
            and len(indptr) - 1 <= vocab
            and (len(indices) == 0 or int(indices.max()) < rows)
        )
        return cls(indices, indptr, tf) if ok else None


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
    """(pair keys token * n + chunk, sorted; term frequencies) of every chunk."""
    n = len(lengths)
    doc = np.repeat(np.arange(n, dtype=np.int64), lengths)
    return np.unique(flat.astype(np.int64) * n + doc, return_counts=True)


def merged_pairs(
    prev: PrevPairs, rows: np.ndarray, flat: np.ndarray, lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """What all_pairs returns, from the previous pairs: `rows[j]` is the previous row of chunk j
    (< 0: a new chunk). None when the kept chunks changed order (then all_pairs)."""
    n = len(lengths)
    cached = rows >= 0
    size = max(
        int(prev.indices.max()) + 1 if len(prev.indices) else 0,
        int(rows.max()) + 1 if len(rows) else 0,
    )
    old2new = np.full(size, -1, dtype=np.int64)
    old2new[rows[cached]] = np.flatnonzero(cached)
    dn = old2new[prev.indices]
    keep = dn >= 0
    # token * n + new row, in place (a dropped row's key is garbage and masked out once)
    key = np.repeat(np.arange(len(prev.indptr) - 1, dtype=np.int64), np.diff(prev.indptr))
    key *= n
    key += dn
    key = key[keep]
    if len(key) > 1 and not bool((key[1:] > key[:-1]).all()):
        return None
    tf = prev.tf[keep].astype(np.int64)
    new = np.flatnonzero(~cached)
    if len(new):
        starts = np.cumsum(lengths) - lengths
        ids = np.concatenate([flat[starts[j] : starts[j] + lengths[j]] for j in new])
        docs = np.repeat(new, lengths[new])
        nkey, ntf = np.unique(ids.astype(np.int64) * n + docs, return_counts=True)
        at = np.searchsorted(key, nkey)
        key, tf = np.insert(key, at, nkey), np.insert(tf, at, ntf)
    return key, tf
