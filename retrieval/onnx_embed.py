"""The model shipped inside the package (issue #27) through ONNX Runtime (docs/agents.md): queries
and, on CPU, documents, by default through an int8 copy. It never imports torch, transformers or
sentence-transformers: they cost seconds to load, onnxruntime + tokenizers milliseconds. The int8
model (dynamic quantization of the weight MatMuls, per output channel) halves index-time embedding
on a small CPU; queries keep fp32, whose vectors find int8 documents as well
(bench/bench_build.py --quality). It needs the `onnx` package; its vectors are a recipe of their
own (index_recipe: part of every vector id)."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np
from kbase.retrieval.embed import default_device
from kbase.retrieval.generations import current_meta

ONNX_DIR = "onnx"
OUTPUT = "token_embeddings"
Where = str | os.PathLike  # a folder

_lock = threading.Lock()
_loaded: dict[tuple, OnnxQueryEmbedder] = {}


def read_meta(onnx_dir: Path) -> dict | None:
    try:
        return json.loads((onnx_dir / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def pooled(sess: Any, encs: list, normalize: bool) -> np.ndarray:
    """The mean-pooled (and normalized) vectors of a batch of tokenizer encodings, padded to the
    longest. The token type ids fed are zeros: a single text's are."""
    n = max(len(e.ids) for e in encs)
    ids, mask, types = np.zeros((3, len(encs), n), dtype=np.int64)
    for i, e in enumerate(encs):
        k = len(e.ids)
        ids[i, :k] = e.ids
        mask[i, :k] = e.attention_mask
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    inputs = {i.name for i in sess.get_inputs()}
    tokens = sess.run([OUTPUT], {k: v for k, v in feed.items() if k in inputs})[0]
    m = mask[:, :, None].astype(np.float32)
    vecs = (tokens.astype(np.float32) * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
    if normalize:
        vecs /= np.clip(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12, None)
    return vecs


class OnnxQueryEmbedder:
    """`embed_query(text)` with onnxruntime; the same vector as Embedder.embed_query."""

    def __init__(self, onnx_dir: Where, threads: int = 0, prepack: bool = True, model: str = ""):
        """`prepack=False`: for a process that embeds one query (a CLI search): packing the weights
        was ~75% of the session's start-up, and an unpacked session costs only ~10 ms more per
        query (vectors differ in the last bits). `model`: another graph file (model.onnx)."""
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.onnx_dir = Path(onnx_dir)
        meta = read_meta(self.onnx_dir)
        if meta is None:
            raise FileNotFoundError(f"no ONNX export under {onnx_dir}")
        if meta["pooling"].get("mode") != "mean_tokens":
            raise ValueError(f"unsupported pooling {meta['pooling'].get('mode')!r}")
        self.normalize = bool(meta["pooling"].get("normalize", True))
        self.full_length = int(meta["pooling"]["max_seq_length"])
        self.dim = int(meta["dim"])
        self._tok = Tokenizer.from_file(str(self.onnx_dir / "tokenizer.json"))
        self._tok.no_padding()
        self._tok.enable_truncation(max_length=self.full_length)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads or max(1, min(2, os.cpu_count() or 1))
        opts.inter_op_num_threads = 1
        # ORT's worker threads otherwise spin for a while after each run, and on a small machine
        # they take the CPU from the vector query that follows every embedding (issue #11).
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.log_severity_level = 3
        if not prepack:
            opts.add_session_config_entry("session.disable_prepacking", "1")
        path = str(self.onnx_dir / (model or "model.onnx"))
        self._session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        self._query_cache = functools.lru_cache(maxsize=2048)(self._embed_query)

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encs = self._tok.encode_batch(list(texts))
        return pooled(self._session, encs, self.normalize).astype(np.float32)

    def _embed_query(self, text: str) -> tuple[float, ...]:
        return tuple(float(x) for x in self.embed_batch([text])[0])

    def embed_query(self, text: str) -> list[float]:
        return list(self._query_cache(text))


def load_query_embedder(onnx_dir: Path, prepack: bool = True) -> OnnxQueryEmbedder:
    """The query embedder of the export in onnx_dir, one per process (`prepack`: see __init__)."""
    key = (str(onnx_dir.resolve()), prepack)
    with _lock:
        emb = _loaded.get(key)
        if emb is None:
            emb = _loaded[key] = OnnxQueryEmbedder(onnx_dir, prepack=prepack)
    return emb


# ---------------------------------------------------------------------------- documents
# Padded tokens per run. Smaller runs keep the FFN activations (tokens x 1536 floats) in cache:
# on the PR chunks of bench/bench_build.py, 1024 took 2.3-2.4 CPU s where 8192 took 3.6 (issue #11).
BATCH_TOKENS = 1024
DEFAULT_PRECISION = "int8"  # KBASE_INDEX_PRECISION (index_precision)


def cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class OnnxDocEmbedder(OnnxQueryEmbedder):
    """`embed(texts, max_length=None)` like retrieval.embed.Embedder, on ONNX Runtime."""

    def __init__(self, onnx_dir: Where, model: str = "", recipe: str = ""):
        """`model`: another graph file; `recipe`: its vector-id part (RECIPE: int8, "": fp32)."""
        # One thread per run and one run per core (embed() runs batches side by side): two threads
        # on a run of a few hundred tokens wait on each other for a third more CPU (issue #11).
        super().__init__(onnx_dir, threads=1, model=model)
        self.workers = cores()
        self.backend = "onnxruntime"
        self.recipe = recipe

    def embed(self, texts: list[str], max_length: int | None = None) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        limit = min(max_length or self.full_length, self.full_length)
        self._tok.enable_truncation(max_length=limit)
        encs = self._tok.encode_batch(list(texts))
        # Longest first: each batch's first text sets its padded length and so its size.
        order = sorted(range(len(encs)), key=lambda i: -len(encs[i].ids))
        batches, i = [], 0
        while i < len(order):
            size = max(8, BATCH_TOKENS // max(len(encs[order[i]].ids), 1))
            batches.append(order[i : i + size])
            i += size

        def run(rows: list[int]) -> None:
            out[rows] = pooled(self._session, [encs[r] for r in rows], self.normalize)

        if self.workers > 1 and len(batches) > 1:
            # ONNX Runtime releases the GIL in run(); one session serves concurrent runs
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(self.workers) as pool:
                list(pool.map(run, batches))
        else:
            for rows in batches:
                run(rows)
        return out


_sessions: dict[tuple, OnnxDocEmbedder] = {}


def cached(d: Path, recipe: str = "") -> OnnxDocEmbedder:
    """One session per export, model file and process: creating one takes ~0.5 s, about what a
    re-index after one edit may take in all (a server or agent re-indexes many times)."""
    name = INT8_FILE if recipe else "model.onnx"
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
    """KBASE_INDEX_PRECISION: the weights that embed documents on CPU with ONNX Runtime, int8 or
    fp32 (the query model); torch and GPUs always use fp32. Unset, an index in `home` keeps its
    vectors' precision: one built on a GPU (fp32), then edited on a laptop, re-embeds the edit."""
    v = os.environ.get("KBASE_INDEX_PRECISION", "").strip().lower()
    if not v and home is not None:
        dense = (current_meta(home) or {}).get("dense")
        if isinstance(dense, str):
            v = "int8" if dense.endswith(f":{RECIPE}") else "fp32"
    v = v or DEFAULT_PRECISION
    if v not in ("int8", "fp32"):
        raise ValueError(f"KBASE_INDEX_PRECISION must be int8 or fp32, not {v!r}")
    return v


def index_recipe(home: Path | None = None) -> str:
    """What embeds this index's documents, as the vector ids name it: "" for fp32 (torch or
    ONNX), else RECIPE (CPU, the `onnx` package present, int8 precision). Decided before the
    model loads: the ids decide what must be embedded."""
    if default_device() == "cpu" and available() and index_precision(home) == "int8":
        return RECIPE
    return ""


# ---------------------------------------------------------------------------- the int8 model
# bump when the quantization below changes: part of every vector id and of the file name
RECIPE = "int8w1"
INT8_FILE = f"model-{RECIPE}.onnx"
_made: dict[str, Path] = {}  # shipped model id -> an int8 file made by this process


def available() -> bool:
    try:
        return importlib.util.find_spec("onnx") is not None
    except ImportError:  # a finder that hides it (tests of the base install)
        return False


def ensure_int8(onnx_dir: Path) -> Path:
    """onnx_dir's int8 model, made now when missing: linked from another home's when this
    process made one from the same shipped model (quantizing takes ~6 s per fresh home; a
    server or the test suite opens many)."""
    out = onnx_dir / INT8_FILE
    if out.is_file():
        return out
    key = (read_meta(onnx_dir) or {}).get("shipped")
    prior = _made.get(key) if key else None
    if prior is not None and prior.is_file():
        tmp = onnx_dir / f".{INT8_FILE}.{os.getpid()}.link"
        try:
            os.link(prior, tmp)
            os.replace(tmp, out)
            return out
        except OSError:
            Path(tmp).unlink(missing_ok=True)
    build_int8(onnx_dir)
    if key:
        _made[key] = out
    return out


def build_int8(onnx_dir: Path) -> Path:
    """onnx_dir/INT8_FILE from onnx_dir/model.onnx (written atomically); returns its path."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = onnx_dir / INT8_FILE
    src = onnx_dir / "model.onnx"
    graph = onnx.load(str(src), load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    # the linear layers: the MatMul nodes with a weight (initializer) input
    nodes = [n.name for n in graph.node if n.op_type == "MatMul" and set(n.input) & inits]
    if not nodes:
        raise ValueError(f"{src}: no MatMul with weights to quantize")
    fd, tmp = tempfile.mkstemp(prefix=f".{INT8_FILE}.", suffix=".tmp", dir=onnx_dir)
    os.close(fd)
    log = logging.getLogger()  # quantize_dynamic warns about pre-processing on the root logger
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        # onnx refuses external weights with several hard links (a process may link an export
        # into each home of a process), so the quantizer reads a private copy
        with tempfile.TemporaryDirectory(prefix=".int8-src-", dir=onnx_dir) as private:
            for f in onnx_dir.glob("model.onnx*"):  # the graph and its external weights
                shutil.copyfile(f, Path(private) / f.name)
            quantize_dynamic(
                str(Path(private) / src.name),
                tmp,
                weight_type=QuantType.QInt8,
                per_channel=True,
                nodes_to_quantize=nodes,
                extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        log.setLevel(level)
    return out


# ---------------------------------------------------------------------------- the shipped model
# float16 weights written back as float32 into `<home>/onnx/` once (~0.2 s), and seed.npz, the
# shipped skills' chunk vectors by text hash (a stale seed costs seconds, never a wrong vector).
# `python bench/make_shipped_model.py EXPORT_DIR ROOT [--seed-only]` remakes both.
SHIPPED = Path(__file__).resolve().parents[1] / "data" / "model"
if not SHIPPED.is_dir():  # an editable checkout: retrieval/ sits beside kbase/
    SHIPPED = Path(__file__).resolve().parents[1] / "kbase" / "data" / "model"
LAYOUT = "layout.json"
WEIGHTS = "weights.f16"
SEED = "seed.npz"


def shipped_available() -> bool:
    return (SHIPPED / LAYOUT).is_file() and (SHIPPED / WEIGHTS).is_file()


def materialize(home: str | os.PathLike) -> Path:
    """`<home>/onnx/` as an export of the shipped model (written once, atomically)."""
    out = Path(home) / ONNX_DIR
    if (read_meta(out) or {}).get("shipped") == _shipped_id():
        return out
    layout = json.loads((SHIPPED / LAYOUT).read_text(encoding="utf-8"))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".onnx.tmp-", dir=out.parent))
    os.chmod(tmp, 0o755)
    try:
        packed = np.fromfile(SHIPPED / WEIGHTS, dtype=np.uint8)
        data = np.zeros(layout["data_bytes"], dtype=np.uint8)
        for t in layout["tensors"]:
            src = packed[t["at"] : t["at"] + t["stored"]]
            if t["f16"]:
                src = src.view(np.float16).astype(np.float32).view(np.uint8)
            data[t["offset"] : t["offset"] + t["length"]] = src
        data.tofile(tmp / layout["data_file"])
        for name in ("model.onnx", "tokenizer.json"):
            shutil.copyfile(SHIPPED / name, tmp / name)
        meta = dict(layout["meta"], shipped=_shipped_id(), source_model_path=str(SHIPPED))
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
        old = out.with_name(f".{out.name}.old-{os.getpid()}-{threading.get_ident()}")
        if out.exists():
            os.replace(out, old)  # renamed aside, then removed: a reader never sees half of it
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _shipped_id() -> str:
    """Names this package's model files: a changed model is materialized again."""
    st = (SHIPPED / WEIGHTS).stat()
    head = (SHIPPED / LAYOUT).read_bytes()
    return hashlib.sha256(head + str(st.st_size).encode()).hexdigest()[:16]


def text_key(text: str, cap: int | None) -> str:
    return hashlib.sha256(f"{cap or 0}\0{text}".encode()).hexdigest()[:24]


class Seed:
    """Shipped vectors by chunk-text key, for one recipe ("" fp32, or RECIPE)."""

    def __init__(self, recipe: str):
        self.rows: dict[str, int] = {}
        self.vectors = np.zeros((0, 0), dtype=np.float32)
        f, name = SHIPPED / SEED, f"vectors_{recipe or 'fp32'}"
        if not f.is_file():
            return
        with np.load(f, allow_pickle=False) as z:
            if name not in z.files:
                return
            self.vectors = z[name]
            self.rows = {k: i for i, k in enumerate(z["keys"].tolist())}

    def get(self, text: str, cap: int | None) -> np.ndarray | None:
        i = self.rows.get(text_key(text, cap))
        return None if i is None else self.vectors[i]


class SeededEmbedder:
    """An embedder that takes shipped vectors where it has them and loads the real embedder
    (`factory`) only for the texts it lacks: a first build of the shipped skills loads no model."""

    full_length = 256

    def __init__(self, factory, recipe: str):
        self._factory = factory
        self._inner: Any = None
        self.recipe = recipe
        self.backend = "shipped vectors"
        self.seed = Seed(recipe)

    def embed(self, texts: list[str], max_length: int | None = None) -> np.ndarray:
        found: list[Any] = [self.seed.get(t, max_length) for t in texts]
        todo = [i for i, v in enumerate(found) if v is None]
        if todo:
            if self._inner is None:  # the embedder behind the shipped vectors
                self._inner = self._factory()
                self.backend = getattr(self._inner, "backend", "torch")
            fresh = self._inner.embed([texts[i] for i in todo], max_length=max_length)
            for j, i in enumerate(todo):
                found[i] = fresh[j]
        return np.stack(found).astype(np.float32) if found else np.zeros((0, 384), np.float32)
