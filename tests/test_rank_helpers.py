"""The vectorised helpers of a search against the loops they replaced (issue #11): one row per
entry, best first, the same rows in the same order with the same scores, on a real index
(real Chroma, real vector files and BM25). Also: a candidate decodes its entry only when asked.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import pr_entry, write_topic_skills
from kbase.retrieval.indexer import build_index
from kbase.retrieval.loaded import CANDIDATES, best_per_entry
from kbase.retrieval.vectors import first_of_each, top_entries

from kbase.api import KnowledgeBase

TOPICS = [
    "paged kv cache decode attention",
    "fp8 blockwise gemm scaling",
    "rmsnorm fused into the prologue",
    "moe expert routing and token permutation",
]


@pytest.fixture(scope="module")
def kb(tmp_path_factory, embedder):
    root = tmp_path_factory.mktemp("rank") / "kb"
    write_topic_skills(root)
    kb = KnowledgeBase(root=root, home=root.parent / "home")
    cards = [
        pr_entry(
            repo,
            i + 1,
            f"{TOPICS[i % len(TOPICS)]} in {repo}, step {i}",
            f"{repo}{i:04d}".ljust(16, "0"),
            tags=[f"repo={repo}"] + (["languages=cuda-cpp"] if i % 3 == 0 else []),
        )
        for repo in ("alpha", "beta")
        for i in range(70)
    ]
    build_index(kb.root, kb.home, kb.embedder, extra_entries=cards)
    return kb


def _loop_best_per_entry(scores, idx, mask):
    """The loop _best_per_entry replaced, sorting every chunk (stable: ties by position)."""
    pos = np.nonzero(scores > 0)[0]
    if mask is not None:
        pos = pos[mask[idx.chunk_entry[pos]]]
    order = pos[np.argsort(-scores[pos], kind="stable")]
    seen, out = set(), []
    for p in order:
        e = int(idx.chunk_entry[p])
        if e not in seen:
            seen.add(e)
            out.append((e, int(p), float(scores[p])))
            if len(out) >= CANDIDATES:
                break
    return out


def _loop_top_entries(parts, q, chunk_entry, mask, n):
    sims = np.concatenate([m @ q for m, _ in parts])
    pos = np.concatenate([p for _, p in parts])
    ok = pos >= 0
    if mask is not None:
        ok &= mask[chunk_entry[np.maximum(pos, 0)]]
    sims, pos = sims[ok], pos[ok]
    seen, out = set(), []
    for r in np.argsort(-sims, kind="stable"):
        e = int(chunk_entry[pos[r]])
        if e not in seen:
            seen.add(e)
            out.append((e, int(pos[r]), float(sims[r])))
            if len(out) >= n:
                break
    return out


def test_first_of_each_matches_a_loop():
    rng = np.random.default_rng(7)
    for size in (0, 1, 5, 300):
        keys = rng.integers(0, max(1, size // 3), size)
        seen, want = set(), []
        for i, k in enumerate(keys.tolist()):
            if k not in seen:
                seen.add(k)
                want.append(i)
        assert first_of_each(keys).tolist() == want


@pytest.mark.parametrize("filtered", [False, True])
def test_best_per_entry_matches_the_loop(kb, filtered):
    idx = kb.searcher().index()
    n = len(idx.chunk_entry)
    assert n > CANDIDATES  # enough chunks that the cut at CANDIDATES entries matters
    mask = idx.entry_mask(None, None, ["languages=cuda-cpp"]) if filtered else None
    chunks = idx.masked_chunks(mask) if filtered else None
    rng = np.random.default_rng(3)
    for trial in range(20):
        scores = rng.random(n).astype(np.float32)
        scores[rng.random(n) < 0.3] = 0  # chunks without a query token
        if trial % 2:
            scores = np.round(scores * 4) / 4  # many ties: the earlier chunk wins
        want = _loop_best_per_entry(scores, idx, mask)
        assert best_per_entry(scores, idx, chunks) == want
    # real BM25 scores of a query
    scores = idx.lexical.scores("fp8 gemm scaling attention")
    assert best_per_entry(scores, idx, chunks) == _loop_best_per_entry(scores, idx, mask)


def test_top_entries_matches_the_loop(kb):
    idx = kb.searcher().index()
    keys = [k for k in idx.partitions if k in idx.vectors.parts]
    parts = [(np.asarray(idx.vectors.matrix(k)), idx.row_chunks(k)) for k in keys]
    rng = np.random.default_rng(5)
    mask = idx.entry_mask(None, None, ["languages=cuda-cpp"])
    for _ in range(10):
        q = rng.standard_normal(idx.vectors.dim).astype(np.float32)
        q /= np.linalg.norm(q)
        for m, n in ((None, 10), (None, CANDIDATES), (mask, 7)):
            got = top_entries(parts, q, idx.chunk_entry, m, n)
            assert got == _loop_top_entries(parts, q, idx.chunk_entry, m, n)


def test_candidates_decode_their_entry_when_asked(kb):
    kb.search("fp8 blockwise gemm", k=1)  # loads the index and the embedder
    s = kb.searcher()
    cands = s.search("fp8 blockwise gemm scaling", k=2, fill_texts=False)
    idx = s.index()
    assert len(cands) > 2
    decoded_before = set(idx.entries._decoded)
    ids = [c.id for c in cands]
    kinds = [c.kind for c in cands]
    assert set(idx.entries._decoded) == decoded_before  # ids and kinds come from the columns
    assert ids == [c.entry.id for c in cands] and kinds == [c.entry.kind for c in cands]
    hits = kb.search("fp8 blockwise gemm scaling", k=2)
    assert len(hits) == 2 and {h.id for h in hits} <= set(ids)
    assert all(h.snippet for h in hits)


def test_bm25_within_one_run_of_chunks_matches_the_full_scores(kb):
    """A filter keeping one run of chunks (the skills, one repo's cards) has BM25 scored over
    that run only: the same scores there, and the same rows per entry."""
    idx = kb.searcher().index()
    runs, found = 0, 0
    for kind, repo in (("skill", None), ("pr", "alpha"), ("pr", "beta")):
        chunks = idx.masked_chunks(idx.entry_mask(kind, repo, None))
        contiguous = int(chunks[-1]) - int(chunks[0]) < chunks.size
        runs += contiguous
        for q in ("fp8 gemm scaling", "paged kv cache decode attention in alpha", "moe"):
            full = idx.lexical.scores(q)
            want = best_per_entry(full, idx, chunks)
            assert kb.searcher()._bm25(idx, q, chunks)[0] == want
            found += bool(want)
            if contiguous:
                within = idx.lexical.scores(q, (int(chunks[0]), int(chunks[-1]) + 1))
                assert np.array_equal(within[chunks], full[chunks])
    assert runs == 3  # skills first, then each repo's cards: every filter here is one run
    assert found >= 6  # most of the questions match something in each run
