"""BM25 over chunks with our code- and CJK-aware tokens (bm25s)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from kbase.retrieval.tokenize import tokens

from kbase.schema import Chunk

logging.getLogger("bm25s").setLevel(logging.ERROR)


def chunk_tokens(chunk: Chunk, title: str) -> list[str]:
    return tokens(f"{title}\n{chunk.text}") or ["<empty>"]


TOKENS_FILE = "tokens.json"


def tokenizer_fingerprint() -> str:
    """Changes with the tokenizer's code or its abbreviation groups."""
    import hashlib
    from importlib import resources

    from kbase.retrieval import tokenize

    h = hashlib.sha256(Path(tokenize.__file__).read_bytes())
    h.update(resources.files("kbase.data").joinpath("abbreviations.yaml").read_bytes())
    return h.hexdigest()[:16]


def load_token_cache(bm25_dir: Path) -> dict[str, list[str]]:
    """Chunk id -> tokens saved with a previous BM25 index, if the tokenizer is unchanged."""
    import json

    try:
        data = json.loads((bm25_dir / TOKENS_FILE).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    return data.get("tokens", {}) if data.get("fingerprint") == tokenizer_fingerprint() else {}


def build_bm25(
    chunks: list[Chunk],
    titles: list[str],
    path: Path,
    cache: dict[str, list[str]] | None = None,
) -> None:
    """`cache`: chunk id -> tokens from the previous generation (chunk ids carry the entry's
    content hash, so a cached id always has the same text); only new chunks are tokenized."""
    import json

    import bm25s

    cache = cache or {}
    corpus = [
        cache.get(c.id) or chunk_tokens(c, t) for c, t in zip(chunks, titles, strict=True)
    ] or [["<empty>"]]
    retriever = bm25s.BM25()
    retriever.index(corpus, show_progress=False)
    retriever.save(str(path), show_progress=False)
    saved = {"fingerprint": tokenizer_fingerprint(), "tokens": {}}
    saved["tokens"] = {c.id: toks for c, toks in zip(chunks, corpus, strict=False)}
    (path / TOKENS_FILE).write_text(json.dumps(saved, ensure_ascii=False), encoding="utf-8")


class Lexical:
    """A saved bm25s index read with numpy alone: importing bm25s pulls in scipy and tqdm, which
    cost more than half a second of every cold `kbase search` (issue #11). The arrays are the
    eager BM25 score matrix in CSC form (one column of (doc, score) per token), so a query's
    scores are the column sums of its tokens, as bm25s computes them."""

    def __init__(self, path: Path):
        import json

        params = json.loads((path / "params.index.json").read_text(encoding="utf-8"))
        if (path / "nonoccurrence_array.index.npy").exists():
            raise ValueError(f"{path}: BM25 variants with a non-occurrence array are not supported")
        self.num_docs = int(params["num_docs"])
        self.dtype = np.dtype(params.get("dtype", "float32"))
        self.data = np.load(path / "data.csc.index.npy", mmap_mode="r")
        self.indices = np.load(path / "indices.csc.index.npy", mmap_mode="r")
        self.indptr = np.load(path / "indptr.csc.index.npy")
        self.vocab: dict[str, int] = json.loads(
            (path / "vocab.index.json").read_text(encoding="utf-8")
        )

    def scores(self, query: str) -> np.ndarray:
        ids = [self.vocab[t] for t in self.compounds(tokens(query)) if t in self.vocab]
        out = np.zeros(self.num_docs, dtype=self.dtype)
        for t in ids:  # a repeated query token counts again, as in bm25s
            a, b = int(self.indptr[t]), int(self.indptr[t + 1])
            if b > a:
                out += np.bincount(
                    self.indices[a:b], weights=self.data[a:b], minlength=self.num_docs
                ).astype(self.dtype, copy=False)
        return out

    def compounds(self, toks: list[str]) -> list[str]:
        """Meet compound names half way, against the index vocabulary: a run-together word the
        index lacks is split into two words it has (flashmla -> flash, mla), and two neighbours
        whose concatenation it has are joined (deep gemm -> deepgemm)."""
        out = list(toks)
        vocab = self.vocab
        for t in toks:
            if t in vocab or len(t) < 6 or not t.isalpha() or not t.isascii():
                continue
            best = None
            for i in range(3, len(t) - 2):
                a, b = t[:i], t[i:]
                if a in vocab and b in vocab and (best is None or min(i, len(b)) > best[0]):
                    best = (min(i, len(b)), a, b)
            if best:
                out.extend(best[1:])
        for a, b in zip(toks, toks[1:], strict=False):
            if a.isalpha() and b.isalpha() and (a + b) in vocab:
                out.append(a + b)
        return out
