"""Query understanding (issue #11): abbreviation groups at index and query time, compound names
against the vocabulary, dates in the question, intent words."""

from __future__ import annotations

import pytest
from kbase.retrieval.lexical import Lexical, build_bm25
from kbase.retrieval.query import parse_dates, plan
from kbase.retrieval.tokenize import concept_token, matched_groups, tokens

from kbase.data import read_yaml
from kbase.schema import Chunk


def test_glossary_has_over_200_groups_of_true_synonyms():
    assert len(read_yaml("abbreviations.yaml")["groups"]) >= 200


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("MLA decode", "multi-head latent attention decode"),
        ("FlashMLA kernel", "flash mla kernel"),
        ("lmdeploy EPLB", "expert load balancing in lmdeploy"),
        ("GQA", "grouped-query attention"),
        ("MTP heads", "multi token prediction heads"),
        ("FA3 varlen", "FlashAttention 3 variable length"),
        ("TMA multicast", "tensor memory accelerator multicast"),
        ("NVFP4 gemm", "nvfp4 GEMM"),
        ("TP/DP/EP", "tensor parallel data parallel expert parallel"),
    ],
)
def test_an_abbreviation_and_its_long_form_share_a_concept_token(a, b):
    ca = {t for t in tokens(a) if t.startswith("\u00a7")}
    cb = {t for t in tokens(b) if t.startswith("\u00a7")}
    assert ca & cb, (tokens(a), tokens(b))


def test_words_that_only_look_alike_do_not_share_a_concept():
    # "window" (sliding window attention) must not become Windows the platform
    assert not set(matched_groups(tokens("windows msvc build"))) & set(
        matched_groups(tokens("sliding window"))
    )
    assert concept_token(0).startswith("\u00a7")


@pytest.mark.parametrize(
    ("q", "since", "until"),
    [
        ("blocked fp8 moe fix Jan 2025", "2025-01-01", "2025-01-31"),
        ("what landed in 2024", "2024-01-01", "2024-12-31"),
        ("regression early 2024", "2024-01-01", "2024-04-30"),
        ("kernels changed 2025-03", "2025-03-01", "2025-03-31"),
        ("since 2025 attention changes", "2025-01-01", None),
        ("before 2024 gqa", None, "2023-12-31"),
        ("2025年3月 的 MLA 修复", "2025-03-01", "2025-03-31"),
        ("Q3 2025 sampling", "2025-07-01", "2025-09-30"),
    ],
)
def test_dates_in_the_question_become_a_range(q, since, until):
    rest, s, u = parse_dates(q)
    assert (s, u) == (since, until)
    assert "2024" not in rest and "2025" not in rest


def test_numbers_that_are_not_years_stay_words():
    assert parse_dates("launched 2048 threads per block") == (
        "launched 2048 threads per block",
        None,
        None,
    )


def test_intent_words():
    assert plan("when was sliding window attention first added").intent_first
    assert plan("flashinfer 第一次支持 MLA").intent_first
    assert plan("prefix caching got slower, what broke it").intent_fix
    assert plan("which PR reverted the fp8 change").intent_revert
    neutral = plan("fused add rmsnorm kernel")
    assert not (neutral.intent_first or neutral.intent_fix or neutral.intent_revert)


def test_dense_text_spells_out_abbreviations_and_splits_camel_case():
    p = plan("lmdeploy EPLB with BatchPrefillWithPagedKVCache")
    assert "expert parallel load balancer" in p.dense
    assert "Batch Prefill With Paged KV Cache" in p.dense
    assert plan("fused add rmsnorm kernel").dense == "fused add rmsnorm kernel"


def _chunk(i: int, text: str) -> Chunk:
    return Chunk(
        id=f"e{i}::0", entry_id=f"e{i}", kind="pr", section="summary", text=text, line=1, path="x"
    )


def test_compound_names_meet_the_vocabulary_half_way(tmp_path):
    # words outside the abbreviation groups, so only the vocabulary can bring them together
    texts = ["add paged_merge decode path", "quokkacache grouped kernels", "sampling kernels"]
    build_bm25([_chunk(i, t) for i, t in enumerate(texts)], ["", "", ""], tmp_path / "bm25")
    lex = Lexical(tmp_path / "bm25")
    assert lex.scores("pagedmerge").max() > 0 and lex.scores("pagedmerge").argmax() == 0
    assert lex.scores("quokka cache").max() > 0 and lex.scores("quokka cache").argmax() == 1
    assert "pagedmerge" not in lex.vocab and "quokka" not in lex.vocab
