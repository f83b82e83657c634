"""Fast query embeddings: the sentence-transformers transformer exported to ONNX, run with
onnxruntime.

A CLI search embeds one short query. Importing sentence-transformers, transformers and torch
and loading the model costs seconds; onnxruntime + tokenizers cost milliseconds. So `kbase index`
exports the model once to `<home>/onnx/` (retrieval/onnx_export.py), and queries load it with
`load_query_embedder`, which returns None whenever the export does not match the current model
(callers then fall back to the torch Embedder). Documents are always embedded by torch.

This module must not import torch, transformers or sentence_transformers at import time, and
`OnnxQueryEmbedder` / `load_query_embedder` never import them at all.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

ONNX_DIR = "onnx"
FORMAT = 1
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT = "token_embeddings"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.bin")

_lock = threading.Lock()
_loaded: dict[tuple, OnnxQueryEmbedder] = {}


def enabled() -> bool:
    """`KBASE_ONNX=0` turns the fast path off (no export, no ONNX queries)."""
    return os.environ.get("KBASE_ONNX", "1").strip().lower() not in ("0", "false", "no", "off")


# ---------------------------------------------------------------------------- model facts
def weights_file(model_path: str | os.PathLike) -> Path | None:
    for name in WEIGHT_FILES:
        f = Path(model_path) / name
        if f.is_file():
            return f
    return None


def model_fingerprint(model_path: str | os.PathLike) -> dict | None:
    """Size, mtime and the sha256 of the first MB of the weights file; None if there is none."""
    f = weights_file(model_path)
    if f is None:
        return None
    st = f.stat()
    with open(f, "rb") as fh:
        head = hashlib.sha256(fh.read(1 << 20)).hexdigest()
    return {"file": f.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256_1mb": head}


def _fp_key(fp: dict) -> str:
    return json.dumps(fp, sort_keys=True)


def pooling_settings(model_path: str | os.PathLike) -> dict:
    """What the sentence-transformers pipeline does after the transformer, read from its config
    files.
    """
    p = Path(model_path)
    modules = json.loads((p / "modules.json").read_text(encoding="utf-8"))
    pool_cfg: dict = {}
    normalize = False
    for m in modules:
        t = m.get("type", "")
        if t.endswith(".Pooling"):
            pool_cfg = json.loads(
                (p / m.get("path", "") / "config.json").read_text(encoding="utf-8")
            )
        elif t.endswith(".Normalize"):
            normalize = True
    modes = [
        k[len("pooling_mode_") :]
        for k, v in pool_cfg.items()
        if k.startswith("pooling_mode_") and v
    ]
    max_len = 256
    sbc = p / "sentence_bert_config.json"
    if sbc.is_file():
        max_len = int(json.loads(sbc.read_text(encoding="utf-8")).get("max_seq_length") or max_len)
    return {
        "mode": modes[0] if len(modes) == 1 else "+".join(modes),
        "normalize": normalize,
        "max_seq_length": max_len,
        "dim": pool_cfg.get("word_embedding_dimension"),
    }


def read_meta(onnx_dir: Path) -> dict | None:
    try:
        return json.loads((onnx_dir / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def is_fresh(onnx_dir: Path, model_path: str, fingerprint: dict | None = None) -> bool:
    """True if onnx_dir holds a complete export of the model now at model_path."""
    meta = read_meta(onnx_dir)
    if not meta or meta.get("format") != FORMAT:
        return False
    fp = fingerprint if fingerprint is not None else model_fingerprint(model_path)
    if fp is None or meta.get("fingerprint") != fp:
        return False
    return all(
        (onnx_dir / f).is_file() for f in meta.get("files", ("model.onnx", "tokenizer.json"))
    )


def checked_meta(onnx_dir: Path) -> dict:
    """onnx_dir's meta.json, of an export this module can pool (mean of the token vectors)."""
    meta = read_meta(onnx_dir)
    if meta is None:
        raise FileNotFoundError(f"no ONNX export under {onnx_dir}")
    if meta["pooling"].get("mode") != "mean_tokens":
        raise ValueError(f"unsupported pooling {meta['pooling'].get('mode')!r}")
    return meta


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
        is their output already (onnx_export._optimize); on it they change nothing (the same
        vectors, to the bit: tests/test_onnx_query.py) and took ~15 ms of a one-query session's
        start. `model`: another graph file in onnx_dir (default model.onnx)."""
        # model.onnx is ORT's optimized graph with external weights (model.onnx.data); see
        # onnx_export._optimize.
        from tokenizers import Tokenizer

        self.onnx_dir = Path(onnx_dir)
        self.meta = meta = checked_meta(self.onnx_dir)
        self.normalize = bool(meta["pooling"].get("normalize", True))
        self.full_length = self.max_length = int(meta["pooling"]["max_seq_length"])
        self.dim = int(meta["dim"])
        self.name = meta.get("name") or os.path.basename(
            os.path.normpath(meta.get("source_model_path", ""))
        )
        self.model_path = meta.get("source_model_path")

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


def load_query_embedder(
    home: str | os.PathLike, model_path: str, prepack: bool = True
) -> OnnxQueryEmbedder | None:
    """The ONNX query embedder of `home/onnx/` if it is an export of the model at model_path, else
    None. `prepack`: see OnnxQueryEmbedder.
    """
    if not enabled():
        return None
    d = Path(home) / ONNX_DIR
    if not model_path:
        # Base install (no torch, no model package): the export kbase index made is the model.
        if read_meta(d) is None:
            return None
        with _lock:
            emb = _loaded.get((str(d.resolve()), "as-exported", prepack))
            if emb is None:
                emb = OnnxQueryEmbedder(d, prepack=prepack)
                _loaded[(str(d.resolve()), "as-exported", prepack)] = emb
        return emb
    try:
        fp = model_fingerprint(model_path)
        if fp is None or not is_fresh(d, model_path, fp):
            return None
        key = (str(d.resolve()), _fp_key(fp), prepack)
        with _lock:
            emb = _loaded.get(key)
            if emb is None:
                emb = _loaded[key] = OnnxQueryEmbedder(d, prepack=prepack)
        return emb
    except Exception:  # a broken export must never break search: the torch path still works
        return None
