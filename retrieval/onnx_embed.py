"""Index-time embeddings with ONNX Runtime: the shipped model written into `<home>/onnx/`
(retrieval/shipped_model.py), or by default its int8 copy (retrieval/onnx_int8.py), run on every
core with texts batched by length.

Two things made ONNX Runtime slower than torch for documents before (issue #11): the query
session's settings (two intra-op threads, tuned for one short text) and padding, since a batch
is padded to its longest text and attention cost grows with length. Here texts are sorted by
token count so each batch holds texts of about the same length, and batches run side by side,
one thread each, without spinning. The fp32 model's vectors agree with the torch model's within
the export's check (cosine distance <= 1e-4, bench/onnx_export.py); the int8 model's are a vector
recipe of their own (index_recipe: part of every vector id and of meta.dense).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from kbase.retrieval import onnx_query as OQ

# Padded tokens per run. Smaller runs keep the FFN activations (tokens x 1536 floats) in cache:
# on the PR chunks of bench/bench_build.py, 1024 took 2.3-2.4 CPU s where 8192 took 3.6 (issue #11).
BATCH_TOKENS = 1024
DEFAULT_PRECISION = "int8"  # KBASE_INDEX_PRECISION (index_precision)


def cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class OnnxDocEmbedder(OQ.OnnxQueryEmbedder):
    """`embed(texts, max_length=None)` like retrieval.embed.Embedder, on ONNX Runtime."""

    def __init__(self, onnx_dir: str | os.PathLike, model: str = "", recipe: str = ""):
        """`model`: another graph file in onnx_dir (default model.onnx); `recipe`: what it is,
        part of the vector ids (retrieval/onnx_int8.RECIPE for the int8 model, "" for fp32)."""
        # One thread per run and one run per core (embed() runs batches side by side): runs of a
        # few hundred tokens split over two threads spend a third more CPU time waiting on each
        # other than they save (issue #11).
        super().__init__(onnx_dir, threads=1, model=model)
        self.workers = cores()
        self.backend = "onnxruntime"
        self.recipe = recipe

    def embed(
        self, texts: list[str], batch_size: int | None = None, max_length: int | None = None
    ) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        limit = min(max_length or self.full_length, self.full_length)
        self._tok.enable_truncation(max_length=limit)
        encs = self._tok.encode_batch(list(texts))
        # Longest first: each batch's first text sets its padded length and so its size.
        order = sorted(range(len(encs)), key=lambda i: -len(encs[i].ids))
        batches = []
        i = 0
        while i < len(order):
            size = batch_size or max(8, BATCH_TOKENS // max(len(encs[order[i]].ids), 1))
            batches.append(order[i : i + size])
            i += size

        def run(rows: list[int]) -> None:
            out[rows] = self._run([encs[r] for r in rows])

        if self.workers > 1 and len(batches) > 1:
            # ONNX Runtime releases the GIL in run(); one session serves concurrent runs
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(self.workers) as pool:
                list(pool.map(run, batches))
        else:
            for rows in batches:
                run(rows)
        return out

    def _run(self, encs: list) -> np.ndarray:
        return OQ.pooled(self._session, encs, self.normalize, type_ids=False)

    def embed_query(self, text: str) -> list[float]:
        return [float(x) for x in self.embed([text])[0]]


_sessions: dict[tuple, OnnxDocEmbedder] = {}


def cached(d: Path, recipe: str = "") -> OnnxDocEmbedder:
    """One session per export, model file and process: creating one takes ~0.5 s, about what a
    re-index after one edit may take in all (a server or agent re-indexes many times)."""
    from kbase.retrieval import onnx_int8 as Q

    name = Q.INT8_FILE if recipe else "model.onnx"
    try:
        st = (d / name).stat()
        key: tuple = (str(d), name, st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        return OnnxDocEmbedder(d, model=name, recipe=recipe)
    emb = _sessions.get(key)
    if emb is None:
        _sessions.clear()  # an older export of this home is never used again
        emb = _sessions[key] = OnnxDocEmbedder(d, model=name, recipe=recipe)
    return emb


def index_precision(home: Path | None = None) -> str:
    """KBASE_INDEX_PRECISION: the weights that embed documents on CPU with ONNX Runtime, int8
    (retrieval/onnx_int8.py) or fp32 (the query model). torch and GPUs always use fp32. Unset,
    an existing index in `home` keeps the precision its vectors have: an index built on a GPU
    (fp32) and then edited on a laptop re-embeds the edit, not every entry."""
    v = os.environ.get("KBASE_INDEX_PRECISION", "").strip().lower()
    if not v and home is not None:
        from kbase.retrieval import onnx_int8 as Q
        from kbase.retrieval.generations import current_meta

        dense = (current_meta(home) or {}).get("dense")
        if isinstance(dense, str):
            v = "int8" if dense.endswith(f":{Q.RECIPE}") else "fp32"
    v = v or DEFAULT_PRECISION
    if v not in ("int8", "fp32"):
        raise ValueError(f"KBASE_INDEX_PRECISION must be int8 or fp32, not {v!r}")
    return v


def index_recipe(home: Path | None = None) -> str:
    """What will embed this index's documents with the shipped model, as the vector ids name
    it: "" for the fp32 model (torch or ONNX: the same vectors within 1e-4), else
    onnx_int8.RECIPE. Decided before the model loads, since the ids decide what must be
    embedded; without the `onnx` package the int8 model cannot be made and documents stay fp32;
    torch on a GPU always embeds fp32."""
    from kbase.retrieval import onnx_int8 as Q
    from kbase.retrieval.embed import default_device

    if default_device() == "cpu" and Q.available() and index_precision(home) == "int8":
        return Q.RECIPE
    return ""
