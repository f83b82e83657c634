"""Index-time embeddings with ONNX Runtime: the export `kbase index` keeps in `<home>/onnx/`
(retrieval/onnx_query.py), run with every core and texts batched by length.

Two things made ONNX Runtime slower than torch for documents before (issue #11): the query
session's settings (two intra-op threads, tuned for one short text) and padding, since a batch
is padded to its longest text and attention cost grows with length. Here the session gets one
thread per core without spinning, and texts are sorted by token count so each batch holds texts
of about the same length. Vectors agree with the torch model's within the export's check
(cosine distance <= onnx_query.MAX_COS_DIST).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from kbase.retrieval import onnx_query as OQ

# Padded tokens per run. Smaller runs keep the FFN activations (tokens x 1536 floats) in cache:
# on the PR chunks of bench/bench_build.py, 1024 took 2.3-2.4 CPU s where 8192 took 3.6 (issue #11).
BATCH_TOKENS = 1024


def cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class OnnxDocEmbedder:
    """`embed(texts, max_length=None)` like retrieval.embed.Embedder, on ONNX Runtime."""

    def __init__(self, onnx_dir: str | os.PathLike, threads: int | None = None, model: str = ""):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.onnx_dir = Path(onnx_dir)
        meta = OQ.read_meta(self.onnx_dir)
        if meta is None:
            raise FileNotFoundError(f"no ONNX export under {self.onnx_dir}")
        if meta["pooling"].get("mode") != "mean_tokens":
            raise ValueError(f"unsupported pooling {meta['pooling'].get('mode')!r}")
        self.meta = meta
        self.normalize = bool(meta["pooling"].get("normalize", True))
        self.full_length = int(meta["pooling"]["max_seq_length"])
        self.dim = int(meta["dim"])
        self.name = meta.get("name") or ""
        self.model_path = meta.get("source_model_path")
        self.backend = "onnxruntime"
        self._tok = Tokenizer.from_file(str(self.onnx_dir / "tokenizer.json"))
        self._tok.no_padding()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads or cores()
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # Spinning workers help a dedicated server; on a shared small machine they steal the CPU
        # from every other process between runs.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        self._session = ort.InferenceSession(
            str(self.onnx_dir / (model or "model.onnx")),
            sess_options=opts,
            providers=["CPUExecutionProvider"],
        )
        self._inputs = {i.name for i in self._session.get_inputs()}

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
        i = 0
        while i < len(order):
            size = batch_size or max(8, BATCH_TOKENS // max(len(encs[order[i]].ids), 1))
            rows = order[i : i + size]
            out[rows] = self._run([encs[r] for r in rows])
            i += size
        return out

    def _run(self, encs: list) -> np.ndarray:
        n = max(len(e.ids) for e in encs)
        ids = np.zeros((len(encs), n), dtype=np.int64)
        mask = np.zeros((len(encs), n), dtype=np.int64)
        for j, e in enumerate(encs):
            ids[j, : len(e.ids)] = e.ids
            mask[j, : len(e.ids)] = e.attention_mask
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        tokens = self._session.run(
            [OQ.OUTPUT], {k: v for k, v in feed.items() if k in self._inputs}
        )
        m = mask[:, :, None].astype(np.float32)
        vecs = (tokens[0].astype(np.float32) * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        if self.normalize:
            vecs /= np.clip(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12, None)
        return vecs

    def embed_query(self, text: str) -> list[float]:
        return [float(x) for x in self.embed([text])[0]]


_sessions: dict[tuple, OnnxDocEmbedder] = {}


def _cached(d: Path) -> OnnxDocEmbedder:
    """One session per export and process: creating one takes ~0.5 s, about what a re-index
    after one edit may take in all (a server or agent re-indexes many times)."""
    try:
        st = (d / "model.onnx").stat()
        key: tuple = (str(d), st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        return OnnxDocEmbedder(d)
    emb = _sessions.get(key)
    if emb is None:
        _sessions.clear()  # an older export of this home is never used again
        emb = _sessions[key] = OnnxDocEmbedder(d)
    return emb


def index_backend() -> str:
    """KBASE_INDEX_BACKEND: auto (ONNX Runtime on CPU when the export is fresh), onnx, torch."""
    v = os.environ.get("KBASE_INDEX_BACKEND", "auto").strip().lower() or "auto"
    if v not in ("auto", "onnx", "torch"):
        raise ValueError(f"KBASE_INDEX_BACKEND must be auto, onnx or torch, not {v!r}")
    return v


def doc_embedder(home: Path, model_path: str | None, torch_factory) -> object | None:
    """The ONNX document embedder for this home, exporting the model first when needed (that
    loads the torch model once); None when ONNX is off, the device is a GPU, or the export
    cannot be made (the caller then embeds with torch)."""
    import sys

    from kbase.retrieval.embed import default_device

    backend = index_backend()
    if backend == "torch" or not OQ.enabled() or default_device() != "cpu":
        return None
    d = home / OQ.ONNX_DIR
    try:
        if model_path is None:
            from kbase.config import default_model_path

            model_path = default_model_path()
        if not OQ.is_fresh(d, model_path):
            emb = torch_factory()
            if not hasattr(emb, "model"):
                return None  # not a sentence-transformers model (a test double)
            OQ.ensure_onnx(home, getattr(emb, "model_path", model_path), emb)
        return _cached(d)
    except Exception as exc:  # noqa: BLE001
        if backend == "onnx":
            raise
        print(
            f"kbase: warning: ONNX Runtime not used for indexing ({type(exc).__name__}: {exc})",
            file=sys.stderr,
        )
        return None
