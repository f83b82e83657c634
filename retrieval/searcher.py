"""Hybrid search: BM25 and dense candidates scored together by a fitted linear ranker
(retrieval/fusion.py), at entry level, after the question is analysed (retrieval/query.py)."""

from __future__ import annotations

import _thread
import functools
import gc
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from kbase.retrieval import fusion as F
from kbase.retrieval import generations as G
from kbase.retrieval import loaded as LD
from kbase.retrieval.fusion import add_features, words
from kbase.retrieval.loaded import Candidate, LoadedIndex, best_per_entry, rows_scores
from kbase.retrieval.query import QueryPlan, plan
from kbase.retrieval.tokenize import tokens

from kbase.closed_sets import MODES
from kbase.schema import Entry


class Future:
    """fn(*args) on a thread of its own; `result()` waits for it and returns what it returned or
    raises what it raised. Not concurrent.futures: it imports logging, ~10 ms of a cold search
    (issue #11). Not threading.Thread either: its start() waits until the new thread runs, and on
    a loaded machine that wake-up was ~6 ms of a warm search's critical path; here the caller
    goes straight on (to embed the query) and meets the thread only at result()."""

    def __init__(self, fn: Callable[..., Any], *args: Any):
        self._value: Any = None
        self._error: BaseException | None = None
        self._done = threading.Lock()
        self._done.acquire()
        _thread.start_new_thread(self._run, (fn, args))

    def _run(self, fn: Callable[..., Any], args: tuple) -> None:
        try:
            self._value = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller of result()
            self._error = exc
        finally:
            self._done.release()

    def result(self) -> Any:
        with self._done:
            pass
        if self._error is not None:
            raise self._error
        return self._value


@dataclass
class Pool:
    """The candidate entries of one query with one feature row each (see fusion.FEATURES)."""

    entries: list[int]
    features: np.ndarray  # (len(entries), len(FEATURES))
    chunk: list[int]  # best chunk position per candidate, -1 if unknown
    bm25_order: list[int]  # candidate rows in BM25 order
    dense_order: list[int]  # candidate rows in dense order
    matched: list[str]  # per row: the trigger/symptom line the question repeats most ("" none)


class Searcher:
    def __init__(
        self,
        home: Path,
        vector_store_factory: Callable[[], Any],
        embedder_factory: Callable[[], Any],
        local_vectors: bool = True,
    ):
        """`local_vectors`: score small partitions from the generation's vector files (the
        embedded store); False sends every dense query to the vector store (a Chroma server)."""
        self.home = home
        self.local_vectors = local_vectors
        self._store_factory = vector_store_factory
        self._embedder_factory = embedder_factory
        self._store = None
        self._loaded: LoadedIndex | None = None
        self._stamp: tuple[int, int] | None = None
        self._lock = threading.Lock()
        self.weights = F.weights_vector()

    def index(self) -> LoadedIndex | None:
        stamp = G.pointer_stamp(self.home)
        if self._loaded is None or stamp != self._stamp:
            with self._lock:
                if self._loaded is None or stamp != self._stamp:
                    gen = G.load_generation(self.home)
                    self._loaded = LoadedIndex(self.home, gen) if gen else None
                    # Leave the index just loaded (~400k objects at 100k entries) out of the
                    # cyclic collector's passes: a full pass over them took 0.2-0.5 s of one warm
                    # search every few hundred (issue #11). Reference counting still frees them.
                    gc.freeze()
                    if self._stamp is not None:
                        # Another process re-indexed: collection handles (and an embedded
                        # client's view of them) may be stale.
                        self._reset_store()
                    self._stamp = stamp
        return self._loaded

    def _reset_store(self) -> None:
        store, self._store = self._store, None
        if store is not None and hasattr(store, "close"):
            store.close()

    def store(self):
        if self._store is None:
            self._store = self._store_factory()
        return self._store

    # ------------------------------------------------------------ retrievers
    def _bm25(
        self, idx: LoadedIndex, text: str, chunks: np.ndarray | None
    ) -> tuple[list[tuple[int, int, float]], np.ndarray]:
        """(best chunk per entry, every chunk's score); `chunks`: the chunk positions a filter
        keeps (LoadedIndex.masked_chunks), None: all."""
        within = None
        if chunks is not None and chunks.size and int(chunks[-1]) - int(chunks[0]) < chunks.size:
            within = (int(chunks[0]), int(chunks[-1]) + 1)  # one run: skills, or a repo's cards
        scores = idx.lexical.scores(text, within)
        return best_per_entry(scores, idx, chunks), scores

    def _query_store(
        self, vec, asks: list[tuple[str, int, Any]], background: bool = False
    ) -> Callable[[], list[tuple[str, float]]]:
        """The store's rows for the asks, started now (on its threads when background) and
        collected by calling the result."""

        wait: Callable[[], list[tuple[str, float]]] | Exception
        try:
            wait = self.store().submit_each(vec, asks, background=background)
        except Exception as exc:  # noqa: BLE001
            wait = exc

        def collect() -> list[tuple[str, float]]:
            try:
                if isinstance(wait, Exception):
                    raise wait
                return wait()
            except Exception as exc:  # noqa: BLE001
                # A re-index by another process can leave this reader's handles pointing at
                # deleted collections or vectors: reopen once, then fall back to BM25 alone.
                self._reset_store()
                try:
                    return self.store().submit_each(vec, asks, background=False)()
                except Exception:  # noqa: BLE001
                    msg = f"vector search failed ({type(exc).__name__}: {exc})"
                    print(f"kbase: warning: {msg}; answering from BM25 alone", file=sys.stderr)
                    return []

        return collect

    def _embed(self, text: str) -> np.ndarray:
        return np.asarray(self._embedder_factory().embed_query(text), dtype=np.float32)

    def _dense(
        self, idx: LoadedIndex, text: str, kind, repo, tags, mask=None, vec=None
    ) -> list[tuple[int, int, float]]:
        """(entry, chunk position, cosine) best first, at most CANDIDATES entries. `vec`: the
        query's embedding when the caller has it already."""
        dp = LD.plan_dense(idx, kind, repo, tags, mask, self.local_vectors)
        if not dp.local and not dp.asks:
            return []
        if vec is None:
            vec = self._embed(text)
        # Chroma's kNN runs on the store's threads while this one scores the vector files.
        remote = self._query_store(vec.tolist(), dp.asks, bool(dp.local)) if dp.asks else None
        out = LD.score_local(idx, vec, dp.local, mask) if dp.local else []
        if remote is not None:
            out = LD.merge(out, LD.store_hits(idx, remote(), mask))
        return out

    # ------------------------------------------------------------ features
    def pool(
        self,
        idx: LoadedIndex,
        qp: QueryPlan,
        kind=None,
        repo=None,
        tags=None,
        mask=None,
        use_bm25: bool = True,
        use_dense: bool = True,
    ) -> Pool:
        chunks = idx.masked_chunks(mask) if mask is not None and use_bm25 else None
        # BM25 on a thread of its own while this one embeds the query (ONNX Runtime releases the
        # GIL). The embedding stays in this thread: the vector queries wait for it, and waking
        # this thread from a finished embedding thread cost ~2 ms a query (issue #11).
        aside = Future(self._bm25, idx, qp.lexical, chunks) if use_dense and use_bm25 else None
        de = self._dense(idx, qp.dense, kind, repo, tags, mask) if use_dense else []
        if aside is not None:
            bm, chunk_scores = aside.result()
        elif use_bm25:
            bm, chunk_scores = self._bm25(idx, qp.lexical, chunks)
        else:
            bm, chunk_scores = [], None
        rows: dict[int, int] = {}
        chunk: list[int] = []
        for e, p, _ in bm + de:
            if e not in rows:
                rows[e] = len(rows)
                chunk.append(p)
            elif chunk[rows[e]] < 0 <= p:
                chunk[rows[e]] = p
        X = np.zeros((len(rows), len(F.FEATURES)), dtype=np.float64)
        col = {f: i for i, f in enumerate(F.FEATURES)}
        if bm:
            top = bm[0][2] or 1.0
            at, sc = rows_scores(bm, rows)
            X[at, col["bm25"]] = sc / top
            X[at, col["bm25_rr"]] = 1.0 / (F.RR_K + np.arange(len(bm)) + 1)
            X[at, col["bm25_level"]] = np.log1p(sc) / np.log1p(max(1, len(words(qp.lexical))))
        if de:
            hi, lo = de[0][2], de[-1][2]
            span = (hi - lo) or 1.0
            at, sc = rows_scores(de, rows)
            X[at, col["dense"]] = (sc - lo) / span
            rr = 1.0 / (F.RR_K + np.arange(len(de)) + 1)
            X[at, col["dense_rr"]] = rr
            X[at, col["dense_code"]] = rr * F.code_share(qp.text)
            X[at, col["dense_raw"]] = sc
        order = list(rows)
        matched = add_features(idx, qp.lexical, order, X, col, chunk_scores, bm[0][2] if bm else 0)
        # PR titles are subject lines, the best summary a card has. A skill's title is one
        # heading among its trigger, description and steps; on the tuning half the feature only
        # helped PR questions.
        prs = np.flatnonzero(idx.kind[order] == "pr") if order else np.zeros(0, np.int64)
        if prs.size:
            qtok = {t for t in tokens(qp.lexical) if len(t) > 1}
            if qtok:
                overlap = idx.title_overlap([order[r] for r in prs], qtok)
                X[prs, col["title"]] = overlap / len(qtok)
        F.add_priors(qp, order, rows, X, col, idx.entries.dates, idx.entries.categories)
        bm_order, de_order = [rows[e] for e, _, _ in bm], [rows[e] for e, _, _ in de]
        return Pool(order, X, chunk, bm_order, de_order, matched)

    # ------------------------------------------------------------ search
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
        weights: dict[str, float] | None = None,
        fill_texts: bool = True,
    ) -> list[Candidate]:
        """`weights` overrides the fitted fusion weights (by feature name), for experiments
        (fusion.DEFAULT_WEIGHTS: the old reciprocal-rank fusion). `fill_texts=False` leaves the
        chunk texts to the caller (`fill_texts()`), which reads them for the hits it keeps."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        idx = self.index()
        if idx is None:
            return []
        tags = list(tags or [])  # as SearchQuery normalized them (archs=hopper: sm90)
        qp = plan(query)
        mask = idx.entry_mask(kind, repo, tags, since, until)
        pool = self.pool(idx, qp, kind, repo, tags, mask, mode != "dense", mode != "bm25")
        if mode != "hybrid":  # one retriever's own order and score
            order = pool.bm25_order if mode == "bm25" else pool.dense_order
            scores = pool.features[order, F.FEATURES.index(mode)]
        else:
            w = F.weights_vector(weights) if weights is not None else self.weights
            s = pool.features @ w
            order = np.argsort(-s, kind="stable").tolist()
            scores = s[order]
        conf = np.zeros(0)
        if len(order):
            conf = F.confidences(F.confidence_features(pool.features, pool.features @ self.weights))
        out = []
        for r, score in zip(order[: max(k, 0) * 4 + 20], scores, strict=False):
            p = pool.chunk[r]
            local = int(idx.chunk_local[p]) if p >= 0 else 0
            c = Candidate(score=float(score), chunk_index=local, source=idx, pos=pool.entries[r])
            c.confidence, c.matched = round(float(conf[r]), 4), pool.matched[r]
            out.append(c)
        if fill_texts:
            idx.fill_texts([c.entry for c in out])
        return out

    @staticmethod
    def fill_texts(cands: list[Candidate]) -> None:
        """Chunk texts for candidates that search() returned with fill_texts=False, from the
        generation each came from (a re-index may have published another since)."""
        by_source: dict[int, tuple[LoadedIndex, list[Entry]]] = {}
        for c in cands:
            by_source.setdefault(id(c.source), (c.source, []))[1].append(c.entry)
        for idx, entries in by_source.values():
            idx.fill_texts(entries)


def make_snippet(text: str, query: str, width: int = 240) -> str:
    flat = re.sub(r"\s+", " ", text).strip()
    if len(flat) <= width:
        return flat
    low = flat.lower()
    starts = [i for w in _snippet_words(query) if (i := low.find(w)) >= 0]
    start = max(0, min(starts) - 40) if starts else 0
    piece = flat[start : start + width]
    return ("…" if start else "") + piece + ("…" if start + width < len(flat) else "")


@functools.lru_cache(maxsize=64)
def _snippet_words(query: str) -> list[str]:
    """The query's words a snippet is centred on: once per query, not once per hit."""
    return [w.lower() for w in re.findall(r"\w+", query) if len(w) > 2]
