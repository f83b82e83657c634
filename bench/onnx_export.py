"""Exporting the embedding model to ONNX, the first step of remaking the model shipped in the
package (bench/make_shipped_model.py): the sentence-transformers transformer exported with
torch.onnx, saved as ORT's optimized graph and checked against torch's vectors.

    python bench/onnx_export.py MODEL_DIR OUT_DIR

A maintainer's step (the `index` extra: torch, sentence-transformers, onnx); kbase itself reads
the shipped model (retrieval/onnx_embed.py) and never imports this.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from kbase.retrieval.onnx_embed import OUTPUT, OnnxQueryEmbedder

FORMAT = 1
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.bin")
OPSET = 17
# Probe texts the export is checked against (torch vs onnx, cosine distance).
PROBES = (
    "warp reduction gives wrong sum",
    "共享内存 bank 冲突",
    "tl.dot(a, b, input_precision='ieee')",
)
MAX_COS_DIST = 1e-4


def model_fingerprint(model_path: str | os.PathLike) -> dict | None:
    """Size, mtime and the sha256 of the first MB of the weights file; None if there is none."""
    import hashlib

    f = next((Path(model_path) / n for n in WEIGHT_FILES if (Path(model_path) / n).is_file()), None)
    if f is None:
        return None
    st = f.stat()
    with open(f, "rb") as fh:
        head = hashlib.sha256(fh.read(1 << 20)).hexdigest()
    return {"file": f.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256_1mb": head}


def pooling_settings(model_path: str | os.PathLike) -> dict:
    """What the sentence-transformers pipeline does after the transformer, from its configs."""
    p = Path(model_path)
    modules = json.loads((p / "modules.json").read_text(encoding="utf-8"))
    pool_cfg: dict = {}
    normalize = False
    for m in modules:
        t = m.get("type", "")
        if t.endswith(".Pooling"):
            pool_cfg = json.loads((p / m.get("path", "") / "config.json").read_text("utf-8"))
        elif t.endswith(".Normalize"):
            normalize = True
    modes = [k[13:] for k, v in pool_cfg.items() if k.startswith("pooling_mode_") and v]
    if isinstance(pool_cfg.get("pooling_mode"), str):  # how sentence-transformers >= 6 saves it
        modes = [{"mean": "mean_tokens"}.get(pool_cfg["pooling_mode"], pool_cfg["pooling_mode"])]
    max_len = 256
    sbc = p / "sentence_bert_config.json"
    if sbc.is_file():
        max_len = int(json.loads(sbc.read_text(encoding="utf-8")).get("max_seq_length") or max_len)
    return {
        "mode": modes[0] if len(modes) == 1 else "+".join(modes),
        "normalize": normalize,
        "max_seq_length": max_len,
        "dim": pool_cfg.get("word_embedding_dimension", pool_cfg.get("embedding_dimension")),
    }


def _export_model(auto_model, path: Path) -> None:
    """torch.onnx.export of the HF transformer: (input_ids, attention_mask, token_type_ids) -> token
    embeddings.
    """
    import warnings

    import torch

    class TokenEmbeddings(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    wrapper = TokenEmbeddings(auto_model).eval()
    ids = torch.tensor([[101, 7308, 2023, 102], [101, 2023, 102, 0]], dtype=torch.long)
    mask = (ids != 0).long()
    dyn = {n: {0: "batch", 1: "sequence"} for n in (*INPUTS, OUTPUT)}

    patch: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    try:
        import onnx  # noqa: F401
    except ImportError:
        # The TorchScript exporter imports `onnx` only to splice in onnxscript functions of custom
        # op domains; this graph has none, so without the package that step is a no-op.
        patch = _skip_onnxscript_functions()
    with patch, warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            wrapper,
            (ids, mask, torch.zeros_like(ids)),
            str(path),
            input_names=list(INPUTS),
            output_names=[OUTPUT],
            dynamic_axes=dyn,
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )


@contextlib.contextmanager
def _skip_onnxscript_functions():
    from torch.onnx._internal.torchscript_exporter import onnx_proto_utils as opu

    orig = opu._add_onnxscript_fn
    opu._add_onnxscript_fn = lambda model_bytes, custom_opsets: model_bytes
    try:
        yield
    finally:
        opu._add_onnxscript_fn = orig


def _optimize(raw: Path, out: Path) -> list[str]:
    """Save raw as ORT's pre-optimized graph (fused attention, layer norm, gelu) with the weights in
    an external file, which loads ~3x faster than the raw export. EXTENDED, not ALL: the result
    stays portable across CPUs. Returns the file names written."""
    import onnxruntime as ort

    data = out.name + ".data"
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.optimized_model_filepath = str(out)
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.optimized_model_external_initializers_file_name", data)
    opts.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
    )
    ort.InferenceSession(str(raw), sess_options=opts, providers=["CPUExecutionProvider"])
    return [out.name, data] if (out.parent / data).is_file() else [out.name]


def _check_against(onnx_dir: Path, embedder) -> None:
    ox = OnnxQueryEmbedder(onnx_dir)
    for text in PROBES:
        a = np.asarray(ox.embed_query(text), dtype=np.float64)
        b = np.asarray(embedder.embed_query(text), dtype=np.float64)
        dist = 1.0 - float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
        if not dist <= MAX_COS_DIST:
            raise RuntimeError(
                f"ONNX export disagrees with torch on {text!r}: cosine distance {dist:.2e}"
            )


def export_onnx(model_path: str, out_dir: str | os.PathLike, embedder=None) -> Path:
    """Export the model at model_path to out_dir (model.onnx, tokenizer.json, meta.json),
    atomically.

    `embedder` is a loaded kbase Embedder of that model (loaded with get_embedder if omitted);
    the export is checked against its `embed_query` before it is published.
    """
    out = Path(out_dir)
    model_path = str(model_path)
    fp = model_fingerprint(model_path)
    if fp is None:
        raise FileNotFoundError(f"no weights file ({', '.join(WEIGHT_FILES)}) in {model_path}")
    pooling = pooling_settings(model_path)
    if pooling["mode"] != "mean_tokens":
        raise ValueError(f"only mean pooling is supported, the model uses {pooling['mode']!r}")
    if not (Path(model_path) / "tokenizer.json").is_file():
        raise FileNotFoundError(f"no tokenizer.json in {model_path}")
    if embedder is None or str(getattr(embedder, "device", "cpu")) != "cpu":
        # the query model runs on the CPU: trace (and check) a CPU copy, not the index's GPU one
        from kbase.retrieval.embed import get_embedder

        embedder = get_embedder(model_path, "cpu")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; a shared home is read by other users
    try:
        import onnxruntime
        import torch

        _export_model(embedder.model[0].auto_model, tmp / "raw.onnx")
        files = _optimize(tmp / "raw.onnx", tmp / "model.onnx")
        (tmp / "raw.onnx").unlink()
        shutil.copy2(Path(model_path) / "tokenizer.json", tmp / "tokenizer.json")
        pooling["max_seq_length"] = int(getattr(embedder, "full_length", pooling["max_seq_length"]))
        meta = {
            "format": FORMAT,
            "source_model_path": model_path,
            "name": getattr(embedder, "name", None),
            "fingerprint": fp,
            "pooling": pooling,
            "dim": int(getattr(embedder, "dim", pooling["dim"])),
            "files": [*files, "tokenizer.json"],
            "inputs": list(INPUTS),
            "output": OUTPUT,
            "opset": OPSET,
            "torch": torch.__version__,
            "onnxruntime": onnxruntime.__version__,
        }
        (tmp / "meta.json").write_text(
            json.dumps(meta, indent=2, ensure_ascii=False), encoding="utf-8"
        )
        _check_against(tmp, embedder)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(export_onnx(sys.argv[1], sys.argv[2]))
