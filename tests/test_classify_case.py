"""Rules match without regard to case on both paths of classify._hits: ASCII text (lowercased,
searched case-sensitively) and other text (re.I)."""

import re

import pytest
from kbase.ingest import classify


@pytest.mark.parametrize(
    "text",
    [
        "Fix FP8 GEMM NaN on SM90 (Hopper)",
        "FUSED_MOE Kernel: RMSNorm + RoPE, TopK Sampling",
        "Refactor AllReduce / NCCL comm; CUDA_GRAPHS & TMA warp_specialization",
        "Triton Flash_Attn PagedAttention KV-Cache",
        "Fix FP8 GEMM für Hopper",  # not ASCII: the re.I patterns
        "FUSED_MOE — RMSNorm Kernel",
    ],
)
def test_both_paths_agree_with_case_insensitive_search(text):
    for rules in (
        classify._TITLE_RULES,
        classify._KERNEL_WORDS,
        classify._LANG_WORDS,
        classify._TECH_WORDS,
    ):
        want = [name for name, rx in rules if re.search(rx.pattern, text, re.I)]
        assert classify._hits(rules, text) == want
        assert classify._hits(rules, text.swapcase()) == want


def test_uppercase_titles_and_paths_get_the_lowercase_tags():
    paths = ["csrc/Fused_MoE/X.cu", "flashinfer/Triton/Norm.py"]
    low = classify.tags("fused moe fp8 for sm90", [p.lower() for p in paths])
    assert classify.tags("FUSED MOE FP8 FOR SM90", paths) == low
    assert set(low.kernel_types) >= {"moe", "norm", "quantization"} and "fp8" in low.techniques
    assert classify.categories("FIX A CRASH", ["a.cu"]) == ["fix"]
    assert classify.categories("Fix a crash für Hopper", ["a.cu"]) == ["fix"]
