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
import tempfile
from pathlib import Path

RECIPE = (
    "int8w1"  # bump when the quantization below changes: part of every vector id and the file name
)
INT8_FILE = f"model-{RECIPE}.onnx"


def available() -> bool:
    return importlib.util.find_spec("onnx") is not None


def weight_matmuls(model) -> list[str]:
    """Names of the MatMul nodes with a weight (initializer) input: the linear layers."""
    inits = {i.name for i in model.graph.initializer}
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and set(n.input) & inits]


def build_int8(onnx_dir: Path) -> Path:
    """onnx_dir/model-int8.onnx from onnx_dir/model.onnx (written atomically); returns its path."""
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
        quantize_dynamic(
            str(src),
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
