"""Fast query embeddings: the embedding model shipped in the package (retrieval/shipped_model.py),
an ONNX export of the sentence-transformers model, run with onnxruntime.

A CLI search embeds one short query. Importing sentence-transformers, transformers and torch
and loading the model costs seconds; onnxruntime + tokenizers cost milliseconds. This module
never imports torch, transformers or sentence_transformers.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

ONNX_DIR = "onnx"
OUTPUT = "token_embeddings"

_lock = threading.Lock()
_loaded: dict[tuple, OnnxQueryEmbedder] = {}


def read_meta(onnx_dir: Path) -> dict | None:
    try:
        return json.loads((onnx_dir / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def session(path: Path, threads: int, optimize: bool = True, prepack: bool = True) -> Any:
    """An ONNX Runtime CPU session of `path` with `threads` intra-op threads."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    # ORT's worker threads otherwise spin for a while after each run, and on a small machine
    # they take the CPU from the vector query that follows every embedding (issue #11).
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if optimize
        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    opts.log_severity_level = 3
    if not prepack:
        opts.add_session_config_entry("session.disable_prepacking", "1")
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


def pooled(sess: Any, encs: list, normalize: bool, type_ids: bool = True) -> np.ndarray:
    """The mean-pooled (and normalized) vectors of a batch of tokenizer encodings, padded to the
    longest. `type_ids=False` feeds zeros (a single text's type ids are zeros anyway)."""
    n = max(len(e.ids) for e in encs)
    ids = np.zeros((len(encs), n), dtype=np.int64)
    mask = np.zeros((len(encs), n), dtype=np.int64)
    types = np.zeros((len(encs), n), dtype=np.int64)
    for i, e in enumerate(encs):
        k = len(e.ids)
        ids[i, :k] = e.ids
        mask[i, :k] = e.attention_mask
        if type_ids:
            types[i, :k] = e.type_ids
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    inputs = {i.name for i in sess.get_inputs()}
    tokens = sess.run([OUTPUT], {k: v for k, v in feed.items() if k in inputs})[0]
    m = mask[:, :, None].astype(np.float32)
    vecs = (tokens.astype(np.float32) * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
    if normalize:
        vecs /= np.clip(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12, None)
    return vecs


# ---------------------------------------------------------------------------- query side
class OnnxQueryEmbedder:
    """`embed_query(text)` with onnxruntime; the same vector as Embedder.embed_query."""

    def __init__(
        self,
        onnx_dir: str | os.PathLike,
        threads: int | None = None,
        prepack: bool = True,
        optimize: bool | None = None,
        model: str = "",
    ):
        """`prepack=False`: for a process that embeds one query (a CLI search). Packing the
        weights for the matrix products was ~75% of the session's start-up here and pays back
        only over many queries; an unpacked session costs ~10 ms more per query, and its
        vectors differ from a packed one's in the last bits (cosine distance ~1e-10).
        `optimize` (default: as prepack): run ORT's graph optimizers again at load. The export
        is their output already (bench/onnx_export.py); on it they change nothing (the same
        vectors, to the bit: tests/test_onnx_query.py) and took ~15 ms of a one-query session's
        start. `model`: another graph file in onnx_dir (default model.onnx)."""
        from tokenizers import Tokenizer

        self.onnx_dir = Path(onnx_dir)
        meta = read_meta(self.onnx_dir)
        if meta is None:
            raise FileNotFoundError(f"no ONNX export under {onnx_dir}")
        if meta["pooling"].get("mode") != "mean_tokens":
            raise ValueError(f"unsupported pooling {meta['pooling'].get('mode')!r}")
        self.normalize = bool(meta["pooling"].get("normalize", True))
        self.full_length = self.max_length = int(meta["pooling"]["max_seq_length"])
        self.dim = int(meta["dim"])

        tok = Tokenizer.from_file(str(self.onnx_dir / "tokenizer.json"))
        tok.no_padding()
        tok.enable_truncation(max_length=self.max_length)
        self._tok = tok
        self._session = session(
            self.onnx_dir / (model or "model.onnx"),
            threads or max(1, min(2, os.cpu_count() or 1)),
            optimize=prepack if optimize is None else optimize,
            prepack=prepack,
        )
        self._query_cache = functools.lru_cache(maxsize=2048)(self._embed_query)

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        """Mean-pooled, normalized vectors for a few texts (padded to the longest)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encs = self._tok.encode_batch(list(texts))
        return pooled(self._session, encs, self.normalize).astype(np.float32)

    def _embed_query(self, text: str) -> tuple[float, ...]:
        return tuple(float(x) for x in self.embed_batch([text])[0])

    def embed_query(self, text: str) -> list[float]:
        return list(self._query_cache(text))


def load_query_embedder(onnx_dir: Path, prepack: bool = True) -> OnnxQueryEmbedder:
    """The query embedder of the export in onnx_dir, one per process. `prepack`: see
    OnnxQueryEmbedder."""
    key = (str(onnx_dir.resolve()), prepack)
    with _lock:
        emb = _loaded.get(key)
        if emb is None:
            emb = _loaded[key] = OnnxQueryEmbedder(onnx_dir, prepack=prepack)
    return emb
