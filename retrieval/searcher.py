"""Hybrid search: BM25 and dense ranks fused with reciprocal rank fusion, at entry level."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from kbase.retrieval.glossary import expand

from kbase.schema import Entry

# Weighted RRF. A small k and double weight on BM25 won on the dev set (bench/bench_search.py):
# queries here are full of literal identifiers and error strings, where exact lexical matches
# are the strongest evidence, and dense retrieval mostly breaks ties and rescues paraphrases.
RRF_K = 5
WEIGHTS = (2.0, 1.0)  # (bm25, dense)
CANDIDATES = 100  # per retriever, entry level
# The embedding model splits identifiers and paths into word pieces that carry little
# meaning, so the more of the query is code, the less the dense list counts:
# weight = max(0, 1 - CODE_SLOPE * share of code-like words). Tuned with the skills dev set
# and the PR-archive query set together (bench/bench_search.py, bench/bench_archive_eval.py).
CODE_SLOPE = 5.0
_CODE_WORD = re.compile(r"[A-Za-z0-9]_[A-Za-z0-9]|[a-z][A-Z]|\w\.\w|/|::|\(\)")


def dense_weight(query: str) -> float:
    words = query.split()
    code = sum(bool(_CODE_WORD.search(w)) for w in words)
    return max(0.0, 1.0 - CODE_SLOPE * code / max(1, len(words)))


MODES = ("hybrid", "bm25", "dense")


@dataclass
class Candidate:
    entry: Entry
    score: float
    chunk_index: int  # index into entry.chunks of the best-matching chunk


class LoadedIndex:
    """One generation held in memory: entries, chunk arrays for filtering, BM25."""

    def __init__(self, home: Path, gen):
        from kbase.retrieval.lexical import Lexical

        self.gen_id = gen.gen_id
        self.entries: list[Entry] = gen.entries
        self.by_id = {e.id: i for i, e in enumerate(self.entries)}
        chunk_entry: list[int] = []
        chunk_local: list[int] = []
        chunk_ids: dict[str, int] = {}
        for ei, e in enumerate(self.entries):
            for ci, c in enumerate(e.chunks):
                chunk_ids[c.id] = len(chunk_entry)
                chunk_entry.append(ei)
                chunk_local.append(ci)
        self.chunk_entry = np.asarray(chunk_entry, dtype=np.int64)
        self.chunk_local = np.asarray(chunk_local, dtype=np.int64)
        self.chunk_ids = chunk_ids
        self.kind = np.asarray([e.kind for e in self.entries])
        self.repo = np.asarray([e.repo or "" for e in self.entries])
        self.lexical = Lexical(gen.path / "bm25")

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
            mask &= np.fromiter(
                (t in e.tags for e in self.entries), dtype=bool, count=len(self.entries)
            )
        if since or until:
            # ISO dates compare as strings on their YYYY-MM-DD prefix; undated entries (skills) drop
            # out
            days = [(e.date or "")[:10] for e in self.entries]
            mask &= np.fromiter(
                (bool(d) and (not since or d >= since) and (not until or d <= until) for d in days),
                dtype=bool,
                count=len(days),
            )
        return mask


def normalize_tag(tag: str) -> str:
    """Accept `archs=hopper` as well as `archs=sm90`; keys outside the vocabulary pass through."""
    from kbase.vocab import canonical_value

    if "=" not in tag:
        raise ValueError(f"tag filter must look like key=value, got {tag!r}")
    key, value = (s.strip() for s in tag.split("=", 1))
    canon = canonical_value(key, value)
    return f"{key}={canon or value}"


def _where(kind, repo, tags) -> dict | None:
    conds = []
    if kind:
        conds.append({"kind": kind})
    if repo:
        conds.append({"repo": repo})
    conds.extend({f"t:{t}": True} for t in tags or [])
    if not conds:
        return None
    return conds[0] if len(conds) == 1 else {"$and": conds}


def _best_per_entry(
    chunk_scores: np.ndarray, idx: LoadedIndex, mask: np.ndarray | None
) -> list[tuple[int, int, float]]:
    """[(entry index, chunk position, score)] best first, one row per entry with score > 0."""
    pos = np.nonzero(chunk_scores > 0)[0]
    if mask is not None:
        pos = pos[mask[idx.chunk_entry[pos]]]
    if pos.size == 0:
        return []
    order = pos[np.argsort(-chunk_scores[pos], kind="stable")]
    seen: set[int] = set()
    out = []
    for p in order:
        e = int(idx.chunk_entry[p])
        if e not in seen:
            seen.add(e)
            out.append((e, int(p), float(chunk_scores[p])))
            if len(out) >= CANDIDATES:
                break
    return out


class Searcher:
    def __init__(
        self,
        home: Path,
        vector_store_factory: Callable[[], Any],
        embedder_factory: Callable[[], Any],
    ):
        self.home = home
        self._store_factory = vector_store_factory
        self._embedder_factory = embedder_factory
        self._store = None
        self._loaded: LoadedIndex | None = None
        self._stamp: tuple[int, int] | None = None
        self._lock = threading.Lock()

    def index(self) -> LoadedIndex | None:
        from kbase.retrieval import generations as G

        stamp = G.pointer_stamp(self.home)
        if self._loaded is None or stamp != self._stamp:
            with self._lock:
                if self._loaded is None or stamp != self._stamp:
                    gen = G.load_generation(self.home)
                    self._loaded = LoadedIndex(self.home, gen) if gen else None
                    self._stamp = stamp
        return self._loaded

    def store(self):
        if self._store is None:
            self._store = self._store_factory()
        return self._store

    def _bm25(self, idx: LoadedIndex, text: str, mask) -> list[tuple[int, int, float]]:
        return _best_per_entry(idx.lexical.scores(text), idx, mask)

    def _dense(
        self, idx: LoadedIndex, text: str, kind, repo, tags, mask=None
    ) -> list[tuple[int, int, float]]:
        vec = self._embedder_factory().embed_query(text)
        rows = self.store().query(vec, n=CANDIDATES * 3, where=_where(kind, repo, tags))
        out, seen = [], set()
        for cid, sim in rows:
            p = idx.chunk_ids.get(cid)
            if p is not None:
                e = int(idx.chunk_entry[p])
            else:
                # A vector from a newer/older generation of the same entry: credit the entry.
                found = idx.by_id.get(cid.split("::", 1)[0])
                if found is None:
                    continue
                e = found
                p = -1
            if e not in seen and (mask is None or mask[e]):
                seen.add(e)
                out.append((e, p, sim))
        return out

    def search(
        self,
        query: str,
        k: int = 5,
        kind=None,
        repo=None,
        tags=None,
        mode: str = "hybrid",
        since: str | None = None,
        until: str | None = None,
        weights: tuple[float, float] = WEIGHTS,
    ) -> list[Candidate]:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        idx = self.index()
        if idx is None:
            return []
        tags = [normalize_tag(t) for t in tags or []]
        exp = expand(query)
        mask = idx.entry_mask(kind, repo, tags, since, until)
        lists = []
        if mode in ("hybrid", "bm25"):
            lists.append((weights[0], self._bm25(idx, exp.lexical, mask)))
        if mode == "dense":
            lists.append((1.0, self._dense(idx, exp.dense, kind, repo, tags, mask)))
        elif mode == "hybrid":
            w_dense = weights[1] * dense_weight(query)
            if w_dense > 0:
                lists.append((w_dense, self._dense(idx, exp.dense, kind, repo, tags, mask)))
        fused: dict[int, float] = {}
        best_chunk: dict[int, tuple[float, int]] = {}
        for w, ranked in lists:
            for rank, (e, p, _s) in enumerate(ranked):
                contrib = w / (RRF_K + rank + 1)
                fused[e] = fused.get(e, 0.0) + contrib
                if p >= 0 and (e not in best_chunk or contrib > best_chunk[e][0]):
                    best_chunk[e] = (contrib, p)
        order = sorted(fused.items(), key=lambda kv: -kv[1])
        out = []
        for e, score in order[: max(k, 0) * 4 + 20]:
            p = best_chunk.get(e, (0.0, -1))[1]
            local = int(idx.chunk_local[p]) if p >= 0 else 0
            out.append(Candidate(entry=idx.entries[e], score=score, chunk_index=local))
        return out


def make_snippet(text: str, query: str, width: int = 240) -> str:
    flat = re.sub(r"\s+", " ", text).strip()
    if len(flat) <= width:
        return flat
    words = [w.lower() for w in re.findall(r"\w+", query) if len(w) > 2]
    low = flat.lower()
    starts = [low.find(w) for w in words if low.find(w) >= 0]
    start = max(0, min(starts) - 40) if starts else 0
    piece = flat[start : start + width]
    return ("…" if start else "") + piece + ("…" if start + width < len(flat) else "")
