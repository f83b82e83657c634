"""A model whose weights are stored in half precision (the copy a GPU machine is sent: the
fp32 file is too big to carry) still computes in fp32, agrees with the fp32 model, and exports
the ONNX query model with one dtype."""

import shutil

import numpy as np
import torch
from kbase.retrieval.embed import Embedder
from safetensors.torch import load_file, save_file

from kbase.config import default_model_path

TEXTS = [
    "flash attention backward pass on Hopper",
    "CUDA error: an illegal memory access was encountered",
    "分页 KV 缓存 的 批量 预填充",
]


def test_half_precision_weights_compute_in_fp32(tmp_path, embedder):
    copy = tmp_path / "model-fp16"
    shutil.copytree(default_model_path(), copy)
    weights = copy / "model.safetensors"
    tensors = load_file(weights)
    save_file({k: v.half() if v.is_floating_point() else v for k, v in tensors.items()}, weights)
    assert {t.dtype for t in load_file(weights).values() if t.is_floating_point()} == {
        torch.float16
    }

    half = Embedder(str(copy), "cpu")
    assert {p.dtype for p in half.model.parameters()} == {torch.float32}
    ours, theirs = half.embed(TEXTS), embedder.embed(TEXTS)
    cos = np.sum(ours * theirs, axis=1) / (
        np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1)
    )
    assert cos.min() > 0.9999, cos
