"""The embedding model shipped inside the package (issue #27; docs/agents.md): float16 weights
written back as float32 into `<home>/onnx/` once (~0.2 s), and seed.npz, the shipped skills' chunk
vectors by text hash (a stale seed costs seconds, never a wrong vector).
`python bench/make_shipped_model.py EXPORT_DIR ROOT [--seed-only]` remakes both."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np
from kbase.retrieval import onnx_embed as OQ

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "model"
if not SHIPPED.is_dir():  # an editable checkout: retrieval/ sits beside kbase/
    SHIPPED = Path(__file__).resolve().parents[1] / "kbase" / "data" / "model"
LAYOUT = "layout.json"
WEIGHTS = "weights.f16"
SEED = "seed.npz"


def available() -> bool:
    return (SHIPPED / LAYOUT).is_file() and (SHIPPED / WEIGHTS).is_file()


def materialize(home: str | os.PathLike) -> Path:
    """`<home>/onnx/` as an export of the shipped model (written once, atomically)."""
    out = Path(home) / OQ.ONNX_DIR
    meta = OQ.read_meta(out)
    if meta is not None and meta.get("shipped") == _shipped_id():
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


# ----------------------------------------------------------------------------- seed vectors
def text_key(text: str, cap: int | None) -> str:
    return hashlib.sha256(f"{cap or 0}\0{text}".encode()).hexdigest()[:24]


class Seed:
    """Shipped vectors by chunk-text key, for one recipe ("" fp32, or onnx_embed.RECIPE)."""

    def __init__(self, recipe: str):
        self.rows: dict[str, int] = {}
        self.vectors = np.zeros((0, 0), dtype=np.float32)
        f = SHIPPED / SEED
        if not f.is_file():
            return
        with np.load(f, allow_pickle=False) as z:
            name = f"vectors_{recipe or 'fp32'}"
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
