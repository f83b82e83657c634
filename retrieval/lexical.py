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

    corpus = [chunk_tokens(c, t) for c, t in zip(chunks, titles, strict=False)] or [["<empty>"]]
    retriever = bm25s.BM25()
    retriever.index(corpus, show_progress=False)
    retriever.save(str(path), show_progress=False)


class Lexical:
    def __init__(self, path: Path):
        import bm25s

        self.retriever = bm25s.BM25.load(str(path))
        self.vocab = self.retriever.vocab_dict

    def scores(self, query: str) -> np.ndarray:
        toks = [t for t in tokens(query) if t in self.vocab]
        if not toks:
            return np.zeros(self.retriever.scores["num_docs"], dtype=np.float32)
        return self.retriever.get_scores(toks)
