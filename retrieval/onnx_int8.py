"""The int8 document model: the ONNX export of retrieval/onnx_query.py with int8 weights in its
linear layers, made once per export beside it (`<home>/onnx/model-int8.onnx`).

Index-time embedding on a small CPU is mostly the six layers' weight MatMuls (issue #11): with
their weights in int8 and activations quantized per batch (onnxruntime's dynamic quantization),
they cost about half. Queries keep the fp32 export: a query is one short text, and the vectors
of the two models agree closely enough for the query to find int8 documents (measured on the
dev sets by bench/bench_build.py --quality).

The activation x activation MatMuls of attention stay fp32 (no weights to quantize, and their
inputs have the widest range). Weights are quantized per output channel: per-tensor scales lose
the small rows of the FFN weights.

Needs the `onnx` package (the `index` extra); without it the index keeps fp32 vectors.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from pathlib import Path

RECIPE = (
    "int8w1"  # bump when the quantization below changes: part of every vector id and the file name
)
INT8_FILE = f"model-{RECIPE}.onnx"


_made: dict[str, Path] = {}  # source export's fingerprint -> an int8 file made by this process


def available() -> bool:
    try:
        return importlib.util.find_spec("onnx") is not None
    except ImportError:  # a finder that hides it (tests of the base install)
        return False


def weight_matmuls(model) -> list[str]:
    """Names of the MatMul nodes with a weight (initializer) input: the linear layers."""
    inits = {i.name for i in model.graph.initializer}
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and set(n.input) & inits]


def ensure_int8(onnx_dir: Path) -> Path:
    """onnx_dir's int8 model, made now when missing: linked from another home's when this
    process made one from an export of the same model (seconds saved per fresh home)."""
    import json

    from kbase.retrieval import onnx_query as OQ

    out = onnx_dir / INT8_FILE
    if out.is_file():
        return out
    meta = OQ.read_meta(onnx_dir) or {}
    key = json.dumps([meta.get("fingerprint"), meta.get("onnxruntime")], sort_keys=True)
    prior = _made.get(key)
    if prior is not None and prior.is_file() and meta.get("fingerprint"):
        tmp = onnx_dir / f".{INT8_FILE}.{os.getpid()}.link"
        try:
            os.link(prior, tmp)
            os.replace(tmp, out)
            return out
        except OSError:
            Path(tmp).unlink(missing_ok=True)
    build_int8(onnx_dir)
    if meta.get("fingerprint"):
        _made[key] = out
    return out


def build_int8(onnx_dir: Path) -> Path:
    """onnx_dir/INT8_FILE from onnx_dir/model.onnx (written atomically); returns its path."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = onnx_dir / INT8_FILE
    src = onnx_dir / "model.onnx"
    nodes = weight_matmuls(onnx.load(str(src), load_external_data=False))
    if not nodes:
        raise ValueError(f"{src}: no MatMul with weights to quantize")
    fd, tmp = tempfile.mkstemp(prefix=f".{INT8_FILE}.", suffix=".tmp", dir=onnx_dir)
    os.close(fd)
    log = logging.getLogger()  # quantize_dynamic warns about pre-processing on the root logger
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        # onnx refuses external weights with several hard links (onnx_query links an export
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
