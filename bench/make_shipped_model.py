#!/usr/bin/env python3
"""Remake the embedding model shipped in the package (kbase/data/model/, read by
retrieval/onnx_embed.py) from an ONNX export, and the seed vectors of the shipped skills.

    python bench/make_shipped_model.py EXPORT_DIR ROOT [--seed-only]

EXPORT_DIR: an export made with the `index` extra (`python bench/onnx_export.py MODEL_DIR
EXPORT_DIR`; needs the `onnx` package). ROOT: the checkout whose skills/ the seed covers.
--seed-only: the skills changed, the model did not (weights.f16 is 45 MB of history each time it
is rewritten). A maintainer's step, not part of what the package runs.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
from kbase.retrieval.onnx_embed import LAYOUT, SEED, SHIPPED, WEIGHTS, text_key

SMALL = 4096  # tensors of fewer elements (layer norms, biases) stay float32: a few KB each


def build(export_dir: Path, root: Path, out: Path = SHIPPED) -> None:
    """Write the shipped model from an export (float32 weights to float16) and the seed vectors
    of every skill chunk under root, with the export's float32 and int8 document models."""
    import onnx

    meta = json.loads((export_dir / "meta.json").read_text(encoding="utf-8"))
    model = onnx.load(str(export_dir / "model.onnx"), load_external_data=False)
    data = np.fromfile(export_dir / "model.onnx.data", dtype=np.uint8)
    tensors, parts, at = [], [], 0
    for init in model.graph.initializer:
        ext = {e.key: e.value for e in init.external_data}
        if not ext:
            continue
        off, length = int(ext["offset"]), int(ext["length"])
        raw = data[off : off + length]
        f16 = init.data_type == onnx.TensorProto.FLOAT and length // 4 >= SMALL
        if f16:
            raw = raw.view(np.float32).astype(np.float16).view(np.uint8)
        tensors.append(
            {"offset": off, "length": length, "at": at, "stored": len(raw), "f16": bool(f16)}
        )
        parts.append(raw)
        at += len(raw)
    out.mkdir(parents=True, exist_ok=True)
    np.concatenate(parts).tofile(out / WEIGHTS)
    keep = {k: meta[k] for k in ("format", "name", "pooling", "dim", "files", "inputs", "output")}
    keep["opset"] = meta.get("opset")
    layout = {
        "data_file": "model.onnx.data",
        "data_bytes": int(len(data)),
        "tensors": tensors,
        "meta": keep,
    }
    (out / LAYOUT).write_text(json.dumps(layout, separators=(",", ":")), encoding="utf-8")
    for name in ("model.onnx", "tokenizer.json"):
        shutil.copyfile(export_dir / name, out / name)
    build_seed(export_dir, root, out)


def build_seed(export_dir: Path, root: Path, out: Path = SHIPPED) -> None:
    from kbase.retrieval import build_stages as DT
    from kbase.retrieval import onnx_embed as Q
    from kbase.retrieval.collect import collect_entries
    from kbase.retrieval.onnx_embed import OnnxDocEmbedder

    entries, _, _ = collect_entries(root)
    texts = sorted({DT.dense_text(e, c) for e in entries if e.kind == "skill" for c in e.chunks})
    fp32 = OnnxDocEmbedder(export_dir).embed(texts)
    Q.ensure_int8(export_dir)
    int8 = OnnxDocEmbedder(export_dir, model=Q.INT8_FILE, recipe=Q.RECIPE).embed(texts)
    keys = np.array([text_key(t, None) for t in texts])
    arrays = {"keys": keys, "vectors_fp32": fp32, f"vectors_{Q.RECIPE}": int8}
    np.savez(out / SEED, **arrays)  # type: ignore[arg-type]


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--seed-only"]
    if len(args) != 2:
        sys.exit(__doc__)
    (build_seed if "--seed-only" in sys.argv else build)(Path(args[0]), Path(args[1]))
