"""Making the ONNX query model: `kbase index` exports the sentence-transformers transformer with
torch.onnx, saves ORT's optimized graph of it and checks its vectors against torch's before it is
published to `<home>/onnx/` (retrieval/onnx_query.py reads it).

Only this side imports torch (inside its functions); a search never imports this module.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from kbase.retrieval.onnx_query import (
    FORMAT,
    INPUTS,
    ONNX_DIR,
    OUTPUT,
    WEIGHT_FILES,
    OnnxQueryEmbedder,
    _fp_key,
    enabled,
    is_fresh,
    model_fingerprint,
    pooling_settings,
    read_meta,
)

OPSET = 17
# Probe texts the export is checked against (torch vs onnx, cosine distance).
PROBES = (
    "warp reduction gives wrong sum",
    "共享内存 bank 冲突",
    "tl.dot(a, b, input_precision='ieee')",
)
MAX_COS_DIST = 1e-4

_exported: dict[
    str, Path
] = {}  # fingerprint key -> an export made by this process (reused for other homes)


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


def _replace_dir(tmp: Path, out: Path) -> None:
    """Move the finished tmp dir to out; an old out is renamed aside first and removed after."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}-{threading.get_ident()}")
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


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
        prior = _exported.get(_fp_key(fp))
        if prior is not None and prior != out and is_fresh(prior, model_path, fp):
            # Already exported in this process (another home): link or copy instead of re-tracing.
            for name in [*(read_meta(prior) or {}).get("files", []), "meta.json"]:
                try:
                    os.link(prior / name, tmp / name)
                except OSError:
                    shutil.copy2(prior / name, tmp / name)
        else:
            import onnxruntime
            import torch

            _export_model(embedder.model[0].auto_model, tmp / "raw.onnx")
            files = _optimize(tmp / "raw.onnx", tmp / "model.onnx")
            (tmp / "raw.onnx").unlink()
            shutil.copy2(Path(model_path) / "tokenizer.json", tmp / "tokenizer.json")
            pooling["max_seq_length"] = int(
                getattr(embedder, "full_length", pooling["max_seq_length"])
            )
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
        _replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _exported[_fp_key(fp)] = out
    return out


def ensure_onnx(home: str | os.PathLike, model_path: str, embedder=None) -> Path | None:
    """Export to home/onnx unless a fresh export is there already; returns the dir, or None if
    disabled.
    """
    if not enabled():
        return None
    d = Path(home) / ONNX_DIR
    if is_fresh(d, model_path):
        return d
    return export_onnx(model_path, d, embedder=embedder)


def refresh_onnx(
    home: Path,
    embedder_factory: Callable[[], object],
    embedder: object = None,
    model_path: str | None = None,
) -> None:
    """The last step of every build (retrieval/indexer.py): keep home/onnx, the fast query
    embedder (retrieval/onnx_query.py), in step with the model. Only when torch is importable;
    a failure is a warning on stderr, never a failed index."""
    import importlib.util
    import sys

    try:
        from kbase.config import model_installed

        if not enabled() or not model_installed():
            return  # the model shipped in the package serves (retrieval/shipped_model.py)
        if importlib.util.find_spec("torch") is None:
            return
        real = getattr(embedder, "real", None)
        if real is not None:  # shipped vectors: the model behind them, if it was loaded
            embedder = real() if getattr(embedder, "loaded", False) else None
        path = getattr(embedder, "model_path", None)
        if path is None:  # nothing was embedded: find the path without loading the model
            path = model_path
            if path is None:
                from kbase.config import default_model_path

                path = default_model_path()
        if is_fresh(Path(home) / ONNX_DIR, path):
            return
        if embedder is None:
            embedder = embedder_factory()
            if hasattr(embedder, "real"):
                embedder = embedder.real()
        path = getattr(embedder, "model_path", None)
        if path is None or not hasattr(embedder, "model"):
            return  # not a sentence-transformers Embedder (a test double): nothing to export
        ensure_onnx(home, path, embedder)
    except Exception as exc:  # noqa: BLE001
        print(
            f"kbase: warning: ONNX query model not exported ({type(exc).__name__}: {exc}); "
            "searches will load torch instead",
            file=sys.stderr,
        )
