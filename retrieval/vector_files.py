"""Each generation's dense vectors as numpy files, one per partition (docs/architecture.md): a
cold search scores a small partition with one matrix product instead of importing chromadb (most
of a cold search), and the indexer learns which vectors exist, and takes them over, without asking
Chroma for every id (issue #11). A published generation's files never change: a reader's view
stays consistent while another process re-indexes."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

VEC_DIR = "vectors"
INDEX = "index.json"
FORMAT = 1
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def file_stem(key: str) -> str:
    safe = _UNSAFE.sub("_", key)
    return f"{safe[:60]}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"


class GenVectors:
    """Read side: the vectors of one generation, loaded per partition on first use (mmap)."""

    def __init__(self, gen_path: Path):
        self.dir = gen_path / VEC_DIR
        try:
            meta = json.loads((self.dir / INDEX).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            meta = {}
        self.ok = meta.get("format") == FORMAT
        self.parts: dict[str, dict] = meta.get("partitions", {}) if self.ok else {}
        self.dim = int(meta.get("dim") or 0)
        self._mats: dict[str, np.ndarray] = {}
        self._ids: dict[str, list[str]] = {}

    def rows(self, key: str) -> int:
        return int(self.parts.get(key, {}).get("rows", 0))

    def matrix(self, key: str) -> np.ndarray:
        if key not in self._mats:
            stem = self.parts[key]["stem"]
            self._mats[key] = np.load(self.dir / f"{stem}.npy", mmap_mode="r")
        return self._mats[key]

    def ids(self, key: str) -> list[str]:
        if key not in self._ids:
            stem = self.parts[key]["stem"]
            self._ids[key] = json.loads((self.dir / f"{stem}.ids.json").read_bytes())
        return self._ids[key]

    def all_ids(self, key: str) -> set[str]:
        return set(self.ids(key)) if key in self.parts else set()

    def vectors_of(self, key: str, wanted: Iterable[str]) -> dict[str, np.ndarray]:
        if key not in self.parts:
            return {}
        pos = {cid: i for i, cid in enumerate(self.ids(key))}
        m = self.matrix(key)
        return {cid: np.asarray(m[pos[cid]]) for cid in wanted if cid in pos}


def top_entries(
    parts: list[tuple[np.ndarray, np.ndarray]],
    q: np.ndarray,
    chunk_entry: np.ndarray,
    mask: np.ndarray | None,
    n: int,
) -> list[tuple[int, int, float]]:
    """Exact cosine search over partitions given as (matrix, chunk position of each row; -1
    for a row the generation does not know): [(entry, chunk position, similarity)], best first,
    one row per entry, at most n, entries outside the mask left out."""
    sims_l, pos_l = [], []
    for m, pos in parts:
        if m.shape[0] == 0:
            continue
        # 512 rows per product: a larger matrix-vector product makes the BLAS start its
        # threads, which on a busy 2-core machine was ~8x slower than staying on one.
        sims = np.concatenate([m[i : i + 512] @ q for i in range(0, m.shape[0], 512)])
        ok = pos >= 0
        if mask is not None:
            ok &= mask[chunk_entry[np.maximum(pos, 0)]]
        sims_l.append(sims[ok])
        pos_l.append(pos[ok])
    if not sims_l:
        return []
    sims = np.concatenate(sims_l)
    pos = np.concatenate(pos_l)
    take = min(len(sims), n * 4)  # chunk rows enough for n entries, mostly
    top = np.argpartition(-sims, take - 1)[:take] if take < len(sims) else np.arange(len(sims))
    top = top[np.argsort(-sims[top], kind="stable")]
    top = top[first_of_each(chunk_entry[pos[top]])[:n]]
    best = pos[top]
    return list(zip(chunk_entry[best].tolist(), best.tolist(), sims[top].tolist(), strict=True))


def first_of_each(keys: np.ndarray) -> np.ndarray:
    """Positions of the first occurrence of each distinct key, in order: a Python loop with a
    set over the best chunks was ~1 ms of a query at 100k entries (issue #11). Not np.unique:
    it imports numpy.ma, ~15 ms of a cold search."""
    by_key = np.argsort(keys, kind="stable")
    k = keys[by_key]
    starts = np.ones(len(k), dtype=bool)
    starts[1:] = k[1:] != k[:-1]
    return np.sort(by_key[starts])


def assemble_generation_vectors(
    tmp: Path,
    by_part: dict[str, list[str]],
    fresh: dict[str, Any],
    prev: GenVectors | None,
    store: Callable[[], Any],
) -> None:
    """The new generation's vector files: a partition whose ids are those of the previous
    generation and got nothing new is copied; the others are assembled from this run's
    vectors, the previous files and, for what neither holds, Chroma. A partition that cannot
    be completed gets no file (its searches go to Chroma)."""
    parts: dict[str, tuple[list[str], Any]] = {}
    dim = 0
    for key, ids in by_part.items():
        if prev is not None and key in prev.parts and prev.ids(key) == ids:
            if not any(i in fresh for i in ids):
                parts[key] = (ids, prev.matrix(key))
                dim = dim or prev.dim
                continue
        got: dict[str, Any] = {i: fresh[i] for i in ids if i in fresh}
        if prev is not None and len(got) < len(ids):
            got.update(prev.vectors_of(key, (i for i in ids if i not in got)))
        if len(got) < len(ids):
            got.update(store().get_vectors(key, [i for i in ids if i not in got]))
        if len(got) < len(ids):
            continue
        mat = np.zeros((0, dim or 1), dtype=np.float32)
        if ids:
            mat = np.stack([np.asarray(got[i], dtype=np.float32) for i in ids])
            dim = dim or mat.shape[1]
        parts[key] = (ids, mat)
    d = tmp / VEC_DIR
    d.mkdir(parents=True, exist_ok=True)
    index: dict[str, dict] = {}
    for key, (ids, vecs) in sorted(parts.items()):
        stem = file_stem(key)
        np.save(d / f"{stem}.npy", np.ascontiguousarray(vecs, dtype=np.float32))
        (d / f"{stem}.ids.json").write_text(json.dumps(ids), "ascii")
        index[key] = {"stem": stem, "rows": len(ids)}
    meta = {"format": FORMAT, "dim": dim, "partitions": index}
    (d / INDEX).write_text(json.dumps(meta), encoding="utf-8")
