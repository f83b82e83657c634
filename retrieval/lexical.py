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


def build_bm25(chunks: list[Chunk], titles: list[str], path: Path) -> None:
    import bm25s

    corpus = [chunk_tokens(c, t) for c, t in zip(chunks, titles, strict=True)] or [["<empty>"]]
    retriever = bm25s.BM25()
    retriever.index(corpus, show_progress=False)
    retriever.save(str(path), show_progress=False)


class Lexical:
    def __init__(self, path: Path):
        import bm25s

        self.retriever = bm25s.BM25.load(str(path))
        self.vocab = self.retriever.vocab_dict

    def scores(self, query: str) -> np.ndarray:
        toks = [t for t in self.compounds(tokens(query)) if t in self.vocab]
        if not toks:
            return np.zeros(self.retriever.scores["num_docs"], dtype=np.float32)
        return self.retriever.get_scores(toks)

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
