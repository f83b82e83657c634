"""BM25's tokenizing spread over processes for a large build: the tokenizer is pure Python, so
threads would only take turns. Each worker returns its shard as a vocabulary of its own (first
occurrence first) and ids into it; merged shard by shard in order, the ids are those a single
process assigns."""

from __future__ import annotations

import os

import numpy as np
from kbase.retrieval.lexical import text_tokens

Pair = tuple[str, str]  # (title, chunk text)
Shard = tuple[list[str], np.ndarray, np.ndarray]  # words, ids into them, tokens per pair


def tokenize_workers() -> int:
    """Processes a large build tokenizes in (KBASE_BM25_WORKERS overrides): none on a small
    machine, whose cores the embedding model already keeps busy, and at most 4. On the H200
    host (16 cores), 4 spawned workers built in 3.98/4.69/4.10 s where 8 took 3.98/4.97/4.36;
    forked, 8 gave builds of median 3,087 entries/s against 4's 3,142 (six each, alternating):
    what is left of the stage is its serial part, merging and scoring."""
    env = os.environ.get("KBASE_BM25_WORKERS", "").strip()
    if env:
        return int(env)
    n = os.cpu_count() or 1
    return min(4, n - 2) if n >= 6 else 0


def tokenized_apart(
    pairs: list[Pair], vocab: dict[str, int], workers: int, fork: bool = False
) -> dict[Pair, np.ndarray]:
    """The token ids of (title, text) pairs, tokenized by `workers` processes; `vocab` grows
    as one process would grow it. A pair missing from the answer (a worker died) is the
    caller's to tokenize: the shards merged before it took their ids in order.

    `fork`: the workers are forked, sharing the pairs without pickling them and importing
    nothing; only a process that uses no CUDA and runs no other thread may ask for it (the
    forked BM25 child of a build). Spawned workers start a fresh interpreter each, which
    also imports the main module: on the H200 host that start-up was most of a 2 s BM25
    stage that tokenizes in about 1.5 s of one core's time."""
    todo = list(dict.fromkeys(pairs))
    if len(todo) < 2 * workers:
        return {}
    shards = _balanced(todo, workers) if fork else _even(todo, 4 * workers)
    out: dict[Pair, np.ndarray] = {}
    results = _forked(shards) if fork else _spawned(shards, workers)
    for shard, got in zip(shards, results, strict=False):
        if got is None:
            break
        words, ids, lengths = got
        lut = np.fromiter(
            (vocab.setdefault(w, len(vocab)) for w in words), dtype=np.int32, count=len(words)
        )
        bounds = np.cumsum(lengths)
        for pair, part in zip(shard, np.split(lut[ids], bounds[:-1]), strict=True):
            out[pair] = part
    return out


def _even(todo: list[Pair], n: int) -> list[list[Pair]]:
    # several shards a spawned worker even out their lengths
    size = -(-len(todo) // n)
    return [todo[i : i + size] for i in range(0, len(todo), size)]


def _balanced(todo: list[Pair], n: int) -> list[list[Pair]]:
    """n runs of consecutive pairs with about the same number of characters each: a forked
    worker takes one shard, so a long shard would be the stage's tail."""
    sizes = np.fromiter((len(t) + len(x) for t, x in todo), dtype=np.int64, count=len(todo))
    ends = np.cumsum(sizes)
    cuts = np.searchsorted(ends, ends[-1] * np.arange(1, n) / n, side="right")
    bounds = [0, *sorted({int(c) for c in cuts if 0 < c < len(todo)}), len(todo)]
    return [todo[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _spawned(shards: list[list[Pair]], workers: int) -> list[Shard | None]:
    """Each shard's result in order from a pool of spawned processes, up to a None where the
    pool broke. Spawned, not forked: the caller may hold a CUDA context and threads."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    out: list[Shard | None] = []
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        for got in pool.map(tokenize_shard, shards):
            out.append(got)
    except BrokenProcessPool:
        # A worker died (seen once on the H200 host). The survivors are killed first: on Python
        # 3.11 the broken pool's shutdown waited forever for a worker still blocked on its task
        # queue.
        survivors = getattr(pool, "_processes", None) or {}
        for proc in list(survivors.values()):
            proc.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        return [*out, None]
    pool.shutdown(wait=True)
    return out


def _forked(shards: list[list[Pair]]) -> list[Shard | None]:
    """Each shard's result in order, one forked child per shard, all started at once; None for
    a child that failed. Every child is read to its end, so none is left blocked on its pipe."""
    import functools

    from kbase.retrieval.forked import ForkedError, run_forked

    children = [
        run_forked(functools.partial(tokenize_shard, s), name="BM25 tokenizer") for s in shards
    ]
    out: list[Shard | None] = []
    for child in children:
        try:
            out.append(child())
        except ForkedError:
            out.append(None)
    return out


def tokenize_shard(pairs: list[Pair]) -> Shard:
    local: dict[str, int] = {}
    ids: list[int] = []
    lengths = []
    for t, text in pairs:
        toks = text_tokens(t, text)
        ids.extend(local.setdefault(x, len(local)) for x in toks)
        lengths.append(len(toks))
    return list(local), np.asarray(ids, dtype=np.int32), np.asarray(lengths, dtype=np.int64)
