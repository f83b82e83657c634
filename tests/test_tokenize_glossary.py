"""Lexical tokens for code identifiers and Chinese; bilingual query expansion."""

from __future__ import annotations

from kbase.retrieval.query import expand
from kbase.retrieval.tokenize import tokens

from kbase.data import read_yaml


def test_identifiers_are_kept_whole_and_split():
    t = tokens("tl.dot with num_warps=8 on sm_90a calls __shfl_down_sync")
    for tok in (
        "tl.dot",
        "tl",
        "dot",
        "num_warps",
        "warp",
        "sm_90a",
        "90a",
        "__shfl_down_sync",
        "shfl",
        "sync",
    ):
        assert tok in t, tok
    assert "cudadevicesynchronize" in tokens("cudaDeviceSynchronize") and "synchronize" in tokens(
        "cudaDeviceSynchronize"
    )


def test_stopwords_and_plurals():
    t = tokens("Why are the kernels slower than the tensors")
    assert "the" not in t and "kernel" in t and "tensor" in t


def test_chinese_becomes_unigrams_and_bigrams():
    t = tokens("共享内存")
    assert {"共", "享", "内", "存", "共享", "享内", "内存"} <= set(t)


def test_glossary_is_large_and_expands_chinese():
    assert len(read_yaml("glossary.yaml")["terms"]) >= 150
    e = expand("共享内存 bank 冲突")
    assert "bank conflict" in e.added and "bank conflict" in e.dense and "共享" not in e.dense
    both = expand("共享内存 的 转置")
    assert {"shared memory", "transpose"} <= set(both.added)
    spill = expand("寄存器溢出怎么办")
    assert "register spill" in spill.added and "overflow" not in spill.added  # longest match wins


def test_english_query_is_left_alone():
    e = expand("warp shuffle reduction")
    assert e.dense == "warp shuffle reduction" and e.lexical.startswith("warp shuffle reduction")
