"""Which weights embed an index's documents (retrieval/onnx_embed.index_precision): int8 for a new
index on CPU, and with KBASE_INDEX_PRECISION unset an existing index keeps the precision its
vectors have, so an index built in fp32 (on a GPU, or by an earlier version) and then edited
re-embeds the edit alone, not every entry."""

from __future__ import annotations

import pytest
from conftest import write_topic_skills
from kbase.retrieval import onnx_embed as Q
from kbase.retrieval.generations import current_meta

from kbase.api import KnowledgeBase


@pytest.mark.skipif(not Q.available(), reason="the onnx package makes the int8 model")
def test_an_existing_index_keeps_its_precision(tmp_path, monkeypatch, embedder):
    root = tmp_path / "kb"
    write_topic_skills(root)
    kb = KnowledgeBase(root=root, home=tmp_path / "home")
    monkeypatch.setenv("KBASE_INDEX_PRECISION", "fp32")
    first = kb.index()
    dense = current_meta(kb.home)["dense"]
    assert not dense.endswith(Q.RECIPE) and len(first.embedded_entries) > 3

    monkeypatch.delenv("KBASE_INDEX_PRECISION")
    skill = sorted((root / "skills").iterdir())[0]
    md = skill / "SKILL.md"
    md.write_text(md.read_text() + "\nOne more line about occupancy.\n")
    again = kb.index()
    assert again.embedded_entries == [skill.name]
    assert current_meta(kb.home)["dense"] == dense

    fresh = KnowledgeBase(root=root, home=tmp_path / "fresh")
    fresh.index()
    assert current_meta(fresh.home)["dense"].endswith(f":{Q.RECIPE}")
