"""Document embeddings through the model's own Rust tokenizer and one forward pass per batch
(Embedder._encode) are the vectors sentence-transformers' encode() gives: same truncation, same
stripping, same pooling and normalisation, whatever the batch size and length cap."""

import numpy as np


def _texts() -> list[str]:
    words = "warp shuffle reduction paged kv cache prefill 共享内存 冲突 tl.dot fp8 gemm".split()
    out = ["  leading and trailing spaces are stripped  ", "x", "CUDA error: misaligned address"]
    for n in (5, 40, 90, 150, 300):  # short, around the 128 cut, past the model's 256
        out.append(" ".join(words[i % len(words)] for i in range(n)))
    return out


def test_direct_encode_matches_sentence_transformers(embedder):
    texts = _texts()
    assert (
        embedder._fast_tokenizer(128) is not None
    )  # else this test would compare encode() to itself
    for max_length in (None, 128, 16):
        ours = embedder.embed(texts, batch_size=3, max_length=max_length)
        embedder.model.max_seq_length = max_length or embedder.full_length
        try:
            theirs = embedder.model.encode(texts, batch_size=64, normalize_embeddings=True)
        finally:
            embedder.model.max_seq_length = embedder.full_length
        cos = np.sum(ours * theirs, axis=1)
        assert ours.shape == theirs.shape and cos.min() > 0.99999, (max_length, cos)
        assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    # the cap is honoured: texts that differ only past 16 word pieces share a vector
    a, b = embedder.embed([texts[-1], texts[-1] + " tail words"], max_length=16)
    assert float(a @ b) > 0.99999
    c, d = embedder.embed([texts[4], texts[4] + " tail words"])  # 40 words: under every cap
    assert float(c @ d) < 0.9999
