"""Our numpy BM25 index scores exactly as bm25s does on the same tokens, and an incremental
build from the token cache scores as a build from scratch."""

from __future__ import annotations

import numpy as np
import pytest
from kbase.retrieval.lexical import Lexical, build_bm25, load_token_cache, text_tokens
from kbase.retrieval.tokenize import tokens

from kbase.schema import Chunk

TEXTS = [
    "warp shuffle reduction returns a wrong sum when the mask skips lanes",
    "shared memory bank conflicts in the transpose kernel; pad the tile",
    "fp8 e4m3 gemm with per-tensor scales on sm90",
    "paged kv cache decode attention kernel for long context",
    "共享内存 bank 冲突 与 padding",
    "warp warp warp reduction",
]


def _chunks(texts):
    return [
        Chunk(
            id=f"e{i}::0", entry_id=f"e{i}", kind="skill", section="body", text=t, line=1, path="x"
        )
        for i, t in enumerate(texts)
    ]


def test_numpy_index_matches_bm25s(tmp_path):
    import bm25s

    chunks = _chunks(TEXTS)
    build_bm25(chunks, ["title"] * len(chunks), tmp_path / "ours")
    ours = Lexical(tmp_path / "ours")
    ref = bm25s.BM25()
    ref.index([text_tokens("title", c.text) for c in chunks], show_progress=False)
    for q in ("warp reduction wrong sum", "bank conflicts 共享内存", "fp8 gemm sm90 warp warp"):
        toks = [t for t in ours.compounds(tokens(q)) if t in ref.vocab_dict]
        assert toks, q
        got = ours.scores(q)
        assert got.shape == (len(TEXTS),) and got.max() > 0
        np.testing.assert_allclose(got, ref.get_scores(toks), rtol=1e-5, atol=1e-6)
    assert not ours.scores("zzzz-not-a-token").any()


def test_incremental_build_equals_a_fresh_one(tmp_path):
    first = _chunks(TEXTS)
    build_bm25(first, ["t"] * len(first), tmp_path / "g1")
    cache = load_token_cache(tmp_path / "g1")
    assert cache is not None and "e0::0" in cache.row
    edited = _chunks(TEXTS[:-1] + ["warp divergence in the reduction tail"])
    edited[-1].id = "e5::new"
    build_bm25(edited, ["t"] * len(edited), tmp_path / "g2", cache=cache)
    build_bm25(edited, ["t"] * len(edited), tmp_path / "fresh")
    a, b = Lexical(tmp_path / "g2"), Lexical(tmp_path / "fresh")
    for q in ("warp divergence", "bank conflicts", "fp8 gemm"):
        np.testing.assert_allclose(a.scores(q), b.scores(q), rtol=1e-6)
    assert a.scores("divergence").argmax() == 5


@pytest.mark.parametrize(
    "change",
    ["edit in the middle", "insert first", "delete two", "reorder", "same", "all new", "to empty"],
)
def test_a_build_from_the_token_cache_scores_as_a_fresh_one(tmp_path, change):
    """A re-index takes the previous generation's token ids for the chunks it kept (in runs) and
    tokenizes the others: whatever the change, it scores every chunk as a build from scratch."""
    first = _chunks(TEXTS)
    build_bm25(first, ["t"] * len(first), tmp_path / "g1")
    new = _chunks(["mbarrier wait hangs on sm90 with tma multicast"])[0]
    new.id = "n::0"
    chunks = {
        "edit in the middle": [*first[:2], new, *first[3:]],
        "insert first": [new, *first],
        "delete two": [first[0], first[2], first[4], first[5]],
        "reorder": [first[1], first[0], *first[2:], new],
        "same": first,
        "all new": [new],
        "to empty": [],
    }[change]
    titles = ["t"] * len(chunks)
    cache = load_token_cache(tmp_path / "g1")
    assert cache is not None
    build_bm25(chunks, titles, tmp_path / "cached", cache=cache)
    build_bm25(chunks, titles, tmp_path / "fresh")
    for q in ("warp reduction", "mbarrier sm90", "bank conflicts", "fp8 gemm"):
        want = Lexical(tmp_path / "fresh").scores(q)
        np.testing.assert_allclose(Lexical(tmp_path / "cached").scores(q), want, rtol=1e-6)


def _title_words(path, n):
    import json

    from kbase.retrieval.lexical import read_title_ids

    vocab = json.loads((path / "vocab.index.json").read_text(encoding="utf-8"))
    word = {i: w for w, i in vocab.items()}
    flat, off = read_title_ids(path)
    assert len(off) == n + 1
    return [{word[int(i)] for i in flat[off[k] : off[k + 1]]} for k in range(n)]


def test_title_ids_are_the_titles_tokens_and_survive_the_cache(tmp_path):
    chunks = _chunks(TEXTS[:3])
    titles = ["Fix FlashMLA decode on sm90", "共享内存 bank 冲突", "Add fp8 GEMM"]
    no_chunks = "an entry without chunks: mbarrier"  # its title words join the vocabulary
    build_bm25(chunks, titles, tmp_path / "g1", entry_titles=[*titles, no_chunks])
    want = [set(tokens(t)) for t in [*titles, no_chunks]]
    assert _title_words(tmp_path / "g1", 4) == want
    cache = load_token_cache(tmp_path / "g1", [*titles, no_chunks])
    assert cache is not None and set(cache.titles) == {*titles, no_chunks}
    renamed = ["Revert FlashMLA decode", titles[1], titles[2]]
    build_bm25(chunks, renamed, tmp_path / "g2", cache=cache, entry_titles=renamed)
    assert _title_words(tmp_path / "g2", 3) == [set(tokens(t)) for t in renamed]


def test_vocabulary_extended_from_the_cache_is_the_full_vocabulary(tmp_path):
    import json

    build_bm25(_chunks(TEXTS[:2]), ["t"] * 2, tmp_path / "g1")
    cache = load_token_cache(tmp_path / "g1")
    build_bm25(_chunks(TEXTS), ["t"] * len(TEXTS), tmp_path / "g2", cache=cache)
    got = json.loads((tmp_path / "g2" / "vocab.index.json").read_text(encoding="utf-8"))
    assert "共享" in got and len(got) > len(cache.vocab)
    assert list(got)[: len(cache.vocab)] == list(cache.vocab)
    assert Lexical(tmp_path / "g2").scores("bank conflicts").argmax() == 1
    same = load_token_cache(tmp_path / "g2")
    build_bm25(_chunks(TEXTS), ["t"] * len(TEXTS), tmp_path / "g3", cache=same)
    assert (tmp_path / "g3" / "vocab.index.json").read_text(encoding="utf-8") == (
        tmp_path / "g2" / "vocab.index.json"
    ).read_text(encoding="utf-8")
