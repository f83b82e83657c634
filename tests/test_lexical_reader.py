"""The numpy BM25 reader scores exactly as bm25s does on the same saved index."""

from __future__ import annotations

import numpy as np
from kbase.retrieval.lexical import Lexical, build_bm25
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


def test_numpy_reader_matches_bm25s(tmp_path):
    import bm25s

    chunks = [
        Chunk(
            id=f"e{i}::0", entry_id=f"e{i}", kind="skill", section="body", text=t, line=1, path="x"
        )
        for i, t in enumerate(TEXTS)
    ]
    build_bm25(chunks, ["title"] * len(chunks), tmp_path / "bm25")
    ours = Lexical(tmp_path / "bm25")
    ref = bm25s.BM25.load(str(tmp_path / "bm25"))
    for q in ("warp reduction wrong sum", "bank conflicts 共享内存", "fp8 gemm sm90 warp warp"):
        toks = [t for t in ours.compounds(tokens(q)) if t in ref.vocab_dict]
        assert toks, q
        expected = ref.get_scores(toks)
        got = ours.scores(q)
        assert got.shape == (len(TEXTS),) and got.max() > 0
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert not ours.scores("zzzz-not-a-token").any()
