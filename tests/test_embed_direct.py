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


def _tokenizer_padding(tok, texts):
    from tokenizers import Tokenizer

    ref = Tokenizer.from_str(tok.to_str())
    ref.enable_padding(pad_id=0, pad_token="[PAD]")
    enc = ref.encode_batch(texts)
    return {
        "input_ids": np.array([e.ids for e in enc]),
        "attention_mask": np.array([e.attention_mask for e in enc]),
        "token_type_ids": np.array([e.type_ids for e in enc]),
    }


def test_numpy_padding_is_the_tokenizers_own(embedder):
    """The batch handed to the model is padded in numpy from one flat run of ids; it must be
    what the tokenizer's own padding gives, also for a text holding special tokens literally,
    and with type ids read token by token when the template gives a text type 1."""
    from tokenizers.processors import TemplateProcessing

    texts = [t.strip() for t in _texts()] + ["[PAD] literal [SEP] tokens [CLS]", ""]
    tok = embedder._fast_tokenizer(128)
    assert embedder._zero_types  # BERT: [CLS] A [SEP] are all type 0
    ours = embedder._padded(tok.encode_batch(texts))
    want = _tokenizer_padding(tok, texts)
    assert ours.keys() == want.keys()
    for k in want:
        assert np.array_equal(ours[k], want[k]), k

    from kbase.retrieval.embed import _single_types_zero

    tok.post_processor = TemplateProcessing(
        single="[CLS] $A:1 [SEP]", special_tokens=[("[CLS]", 101), ("[SEP]", 102)]
    )
    assert not _single_types_zero(tok)
    was = embedder._zero_types
    embedder._zero_types = False
    try:
        ours = embedder._padded(tok.encode_batch(texts))
    finally:
        embedder._zero_types = was
        embedder._tokenizers.pop(128)  # the next caller gets an untouched copy
    want = _tokenizer_padding(tok, texts)
    assert want["token_type_ids"].any()
    for k in want:
        assert np.array_equal(ours[k], want[k]), k


def test_a_stream_of_batches_gives_what_embed_gives(embedder):
    """embed_batches tokenizes the next batch on a thread while the model runs this one (a
    GPU's route, asked for here on the CPU): each batch's vectors are embed()'s exactly, in
    order, an empty batch included, whatever its length cap."""
    texts = _texts()
    batches = [(texts[:3], 128), ([], None), (texts[3:], 16), (texts, None)]
    got = list(embedder.embed_batches(iter(batches), ahead=True))
    assert len(got) == len(batches)
    for (chunk, cap), vecs in zip(batches, got, strict=True):
        want = embedder.embed(chunk, max_length=cap)
        assert vecs.shape == want.shape == (len(chunk), embedder.dim)
        assert np.array_equal(vecs, want)
    assert not [t for t in __import__("threading").enumerate() if "kbase-tokenize" in t.name]
