"""Dense embeddings from a local sentence-transformers model; never downloads anything."""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

_lock = threading.Lock()
_models: dict[str, Embedder] = {}


def default_device() -> str:
    """KBASE_DEVICE (`kbase index --device` sets it): cpu, cuda, cuda:1 ...; default cpu."""
    return os.environ.get("KBASE_DEVICE", "").strip() or "cpu"


# How a GPU computes document vectors (KBASE_GPU_PRECISION). tf32 (the default) keeps fp32
# storage with tensor-core products; fp32 is exact to the CPU's vectors; fp16 runs the matrix
# products under autocast (layer norms and softmax stay fp32). Once the tokenizer stopped being
# the bottleneck, the model's fp32 products were: on the H200 tf32 embedded the 10k-chunk archive
# in 1.9-2.1 s against fp32's 2.6-2.9 s (fp16 2.4-2.9 s), with vectors at cosine >= 0.999999 to
# the CPU's fp32 ones (bench/bench_build.py --device cuda --save-vectors, then
# bench/vector_agreement.py), so both count as the fp32 model's vectors.
GPU_PRECISIONS = ("fp32", "tf32", "fp16")


def gpu_precision() -> str:
    value = os.environ.get("KBASE_GPU_PRECISION", "").strip().lower() or "tf32"
    if value not in GPU_PRECISIONS:
        raise ValueError(
            f"KBASE_GPU_PRECISION must be one of {', '.join(GPU_PRECISIONS)}, got {value!r}"
        )
    return value


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
    import sys

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
        # On a GPU the model waits on the tokenizer (10k PR chunks: 1.5 s on one core of the
        # H200 machine, 0.2 s on its 16), so it gets every core there. On the CPU the cores are
        # the model's, and processes forked after parallel tokenizing would warn.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false" if device == "cpu" else "true")
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
        if device.startswith("cuda"):
            if not torch.cuda.is_available():
                raise RuntimeError(f"device {device!r} asked for, but torch sees no CUDA GPU")
        self.device = device
        self.precision = gpu_precision() if device.startswith("cuda") else "fp32"
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
        self._prep = getattr(self.model, "preprocess", None) or self.model.tokenize
        self._query_cache = functools.lru_cache(maxsize=2048)(self._embed_query)
        self._tokenizers: dict[int, Any] = {}
        self._pad_id, self._zero_types = 0, False  # set with the first tokenizer
        # what the model's own tokenizer hands it (BERT-style models take token type ids)
        self._type_ids = "token_type_ids" in self._prep(["x"])

    def embed(
        self, texts: list[str], batch_size: int | None = None, max_length: int | None = None
    ) -> np.ndarray:
        """`max_length` truncates long texts: attention cost grows with length, so PR cards
        (thousands of long file lists) embed their first 128 word pieces; BM25 sees it all."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if batch_size is None:  # a GPU wants big batches; on CPU 64 keeps padding waste low
            # a GPU takes what it is handed in one go (a build hands it build_stages.embed_batch)
            batch_size = 64 if self.device == "cpu" else 4096
        length = min(max_length or self.full_length, self.full_length)
        tok = self._fast_tokenizer(length)
        if tok is not None:
            return self._encode(tok, texts, batch_size)
        self.model.max_seq_length = length
        try:
            with self._precision():
                vecs = self.model.encode(
                    texts,
                    batch_size=batch_size,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
        finally:
            self.model.max_seq_length = self.full_length
        return vecs.astype(np.float32)

    def _fast_tokenizer(self, length: int) -> Any:
        """A copy of the model's own Rust tokenizer, truncating at `length` and not padding
        (_encode pads in numpy); None when the model has none (then encode() does it all).

        On the H200, `encode()` spent 3.7-4.0 s on 10k PR chunks, most of it in transformers'
        Python plumbing around the tokenizer; this path took 1.5 s for vectors within 3e-7 of
        its (issue #11, bench/bench_build.py --device cuda)."""
        tok = self._tokenizers.get(length)
        if tok is not None or length in self._tokenizers:
            return tok
        backend = getattr(getattr(self.model, "tokenizer", None), "backend_tokenizer", None)
        if backend is not None:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_str(backend.to_str())
            tok.enable_truncation(length)
            tok.no_padding()
            self._pad_id = int(self.model.tokenizer.pad_token_id or 0)
            self._zero_types = _single_types_zero(tok)
        self._tokenizers[length] = tok
        return tok

    def _encode(self, tok: Any, texts: list[str], batch_size: int) -> np.ndarray:
        """What `encode(normalize_embeddings=True)` computes: texts stripped as
        sentence-transformers strips them, longest first so that each batch pads little."""
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i in range(0, len(texts), batch_size):
            rows = order[i : i + batch_size]
            out[rows] = self._forward(self._tokenized(tok, [texts[j] for j in rows]))
        return out

    def _tokenized(self, tok: Any, texts: list[str]) -> dict[str, np.ndarray]:
        return self._padded(tok.encode_batch([str(t).strip() for t in texts]))

    def _forward(self, feats: dict[str, np.ndarray]) -> np.ndarray:
        """The normalised sentence vectors of one tokenized batch."""
        import torch

        with torch.inference_mode(), self._precision():
            on = {k: torch.from_numpy(v).to(self.device) for k, v in feats.items()}
            vecs = self.model.forward(on)["sentence_embedding"]
            return torch.nn.functional.normalize(vecs.float(), dim=1).cpu().numpy()

    def embed_batches(
        self, batches: Iterable[tuple[list[str], int | None]], ahead: bool | None = None
    ) -> Iterator[np.ndarray]:
        """The vectors of each (texts, max_length) in turn, as embed(texts, max_length=...)
        gives them, each batch in one forward pass. On a GPU the next batch is tokenized and
        padded on a thread while the model runs this one: the tokenizer (0.25 s of the H200
        host's 16 cores for 10k PR chunks, outside the GIL) then overlaps the model's 0.2 s
        instead of taking turns with it. `ahead` (default: on a GPU) asks for that thread; on
        a CPU the model's own threads want the cores."""
        if ahead is None:
            ahead = self.device != "cpu"
        if not ahead or self._fast_tokenizer(self.full_length) is None:
            for texts, cap in batches:
                yield self.embed(texts, max_length=cap)
            return
        from concurrent.futures import Future, ThreadPoolExecutor

        def prepare(texts: list[str], cap: int | None) -> tuple[np.ndarray, dict]:
            length = min(cap or self.full_length, self.full_length)
            order = np.argsort([-len(t) for t in texts], kind="stable")
            return order, self._tokenized(self._fast_tokenizer(length), [texts[j] for j in order])

        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kbase-tokenize")
        try:
            todo = iter(batches)
            first = next(todo, None)
            soon: Future | None = pool.submit(prepare, *first) if first is not None else None
            while soon is not None:
                order, feats = soon.result()
                after = next(todo, None)
                soon = pool.submit(prepare, *after) if after is not None else None
                out = np.empty((len(order), self.dim), dtype=np.float32)
                if len(order):
                    out[order] = self._forward(feats)
                yield out
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _padded(self, enc: list[Any]) -> dict[str, np.ndarray]:
        """A batch's ids, attention mask (and token type ids) padded to its longest text, as the
        tokenizer's own padding makes them. Built from one flat run of ids: one Python list per
        text and field converted to tensors cost 0.54 s of the H200 host's single thread, held
        under the GIL, for 10k PR chunks (more than the model's 0.2 s)."""
        from itertools import chain

        lengths = np.fromiter((len(e) for e in enc), dtype=np.int64, count=len(enc))
        total, width = int(lengths.sum()), int(lengths.max(initial=0))
        mask = np.arange(width)[None, :] < lengths[:, None]
        ids = np.full((len(enc), width), self._pad_id, dtype=np.int64)
        ids[mask] = np.fromiter(chain.from_iterable(e.ids for e in enc), np.int64, total)
        feats = {"input_ids": ids, "attention_mask": mask.astype(np.int64)}
        if self._type_ids:
            types = np.zeros((len(enc), width), dtype=np.int64)
            if not self._zero_types:
                flat = chain.from_iterable(e.type_ids for e in enc)
                types[mask] = np.fromiter(flat, np.int64, total)
            feats["token_type_ids"] = types
        return feats

    @contextlib.contextmanager
    def _precision(self) -> Iterator[None]:
        if self.precision == "fp32":
            yield
            return
        import torch

        if self.precision == "fp16":
            with torch.autocast("cuda", dtype=torch.float16):
                yield
            return
        was = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32 = was

    def _embed_query(self, text: str) -> tuple[float, ...]:
        # encode() spends most of a single-query call in batching and progress plumbing;
        # a direct forward pass is ~5x faster and gives the same vector.
        import torch

        with torch.inference_mode():
            feats = self._prep([text])
            vec = self.model.forward(feats)["sentence_embedding"][0]
            vec = torch.nn.functional.normalize(vec, dim=0)
        return tuple(vec.float().tolist())

    def embed_query(self, text: str) -> list[float]:
        return list(self._query_cache(text))


def _single_types_zero(tok: Any) -> bool:
    """Whether the tokenizer gives every token of a single text type id 0 (BERT's [CLS] A
    [SEP]): then a batch's type ids are zeros, not read token by token."""
    import json

    post = json.loads(tok.to_str()).get("post_processor") or {}
    kind = post.get("type")
    if kind in ("BertProcessing", "RobertaProcessing"):
        return True
    if kind == "TemplateProcessing":
        items = post.get("single") or []
        return all(v.get("type_id", 0) == 0 for item in items for v in item.values())
    return False


def get_embedder(model_path: str, device: str | None = None) -> Embedder:
    """One model per process and device: loading costs seconds, queries cost milliseconds."""
    device = device or default_device()
    key = model_path if device == "cpu" else f"{model_path}@{device}"
    with _lock:
        emb = _models.get(key)
        if emb is None:
            emb = _models[key] = Embedder(model_path, device)
        return emb
