"""Dense embeddings from a local sentence-transformers model; never downloads anything."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from collections.abc import Iterator

import numpy as np

_lock = threading.Lock()
_models: dict[str, Embedder] = {}


def default_device() -> str:
    """KBASE_DEVICE (`kbase index --device` sets it): cpu, cuda, cuda:1 ...; default cpu."""
    return os.environ.get("KBASE_DEVICE", "").strip() or "cpu"


class _NoTriton:
    """A meta-path finder that says triton is not installed."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "triton" or name.startswith("triton."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


@contextlib.contextmanager
def without_triton() -> Iterator[None]:
    """Import torch and sentence-transformers as if triton were not installed.

    transformers imports torch._dynamo, which imports triton where it is installed: seconds of
    start-up, and at exit ~30 lines of nanobind "leaked instance" warnings on stderr of every
    first search (issue #27). Embedding never runs a Triton kernel. torch decides once, at that
    import, that triton is missing (a process that imported triton before keeps it)."""
    if "triton" in sys.modules or "torch" in sys.modules:
        yield
        return
    finder = _NoTriton()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


class Embedder:
    def __init__(self, model_path: str, device: str = "cpu"):
        # Belt and braces: the path is local, and the hub must never be consulted.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        # the cores are the model's, and processes forked after parallel tokenizing would warn
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        if not os.path.isdir(model_path):
            raise FileNotFoundError(f"embedding model not found at {model_path} (set KBASE_MODEL)")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        with without_triton():
            import torch
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()

        self.model_path = model_path
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError(f"device {device!r} asked for, but torch sees no CUDA GPU")
        self.device = device
        # Loaded in the dtype stored (transformers' defaults for that differ between versions),
        # then computed in fp32 everywhere: vectors agree across machines whether the weights came
        # as the fp32 file or the fp16 copy sent to a GPU machine, and the ONNX export (traced
        # from this model) has one dtype.
        self.model = SentenceTransformer(
            model_path, device=device, local_files_only=True, model_kwargs={"dtype": "auto"}
        )
        if any(p.dtype != torch.float32 for p in self.model.parameters()):
            self.model.float()
        self.full_length = int(self.model.max_seq_length or 256)  # None: the MiniLM default
        self.name = os.path.basename(os.path.normpath(model_path))
        dim_fn = (
            getattr(self.model, "get_embedding_dimension", None)
            or self.model.get_sentence_embedding_dimension
        )
        dim = dim_fn()
        if dim is None:
            raise ValueError(f"{model_path}: the model does not say its embedding dimension")
        self.dim = int(dim)
        self._query_cache = functools.lru_cache(maxsize=2048)(self._embed_query)

    def embed(self, texts: list[str], max_length: int | None = None) -> np.ndarray:
        """`max_length` truncates long texts: attention cost grows with length, so PR cards
        (thousands of long file lists) embed their first 128 word pieces; BM25 sees it all."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self.model.max_seq_length = min(max_length or self.full_length, self.full_length)
        try:
            vecs = self.model.encode(
                texts,
                # a GPU wants big batches; on CPU 64 keeps padding waste low
                batch_size=64 if self.device == "cpu" else 4096,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        finally:
            self.model.max_seq_length = self.full_length
        return vecs.astype(np.float32)

    def _embed_query(self, text: str) -> tuple[float, ...]:
        return tuple(float(x) for x in self.embed([text])[0])

    def embed_query(self, text: str) -> list[float]:
        return list(self._query_cache(text))


def get_embedder(model_path: str, device: str | None = None) -> Embedder:
    """One model per process and device: loading costs seconds, queries cost milliseconds."""
    device = device or default_device()
    key = model_path if device == "cpu" else f"{model_path}@{device}"
    with _lock:
        emb = _models.get(key)
        if emb is None:
            emb = _models[key] = Embedder(model_path, device)
        return emb
