"""A searcher's lazy view of a generation (retrieval/generations.py, EntryTable) against the full
load."""

from __future__ import annotations

import shutil

import pytest
from conftest import TOPICS, pr_entry, write_topic_skills
from kbase.retrieval import generations as G
from kbase.retrieval.generations import EntryTable
from kbase.retrieval.indexer import build_index

from kbase.api import KnowledgeBase
from kbase.schema import Entry


def _cards() -> list[Entry]:
    return [
        pr_entry("flashinfer", 1, "fix fp8 scale in the gemm epilogue", "h1", date="2024-03-01"),
        pr_entry("flashinfer", 2, "add a sampling kernel", "h2", tags=["repo=flashinfer"]),
        pr_entry("deepgemm", 3, "revert the tma prefetch", "h3", date="2023-01-02"),
    ]


def _built(kb_root, tmp_path, embedder) -> KnowledgeBase:
    write_topic_skills(kb_root)
    kb = KnowledgeBase(root=kb_root, home=tmp_path / "home")
    kb._embedder = embedder
    build_index(kb.root, kb.home, kb.embedder, extra_entries=_cards())
    return kb


def test_lazy_table_decodes_the_entries_of_the_full_load(kb_root, tmp_path, embedder):
    kb = _built(kb_root, tmp_path, embedder)
    full = G.load_generation(kb.home, full=True)
    lazy = G.load_generation(kb.home)
    assert full is not None and lazy is not None and isinstance(lazy.entries, EntryTable)
    table = lazy.entries
    want = [
        e.model_copy(update={"chunks": [c.model_copy(update={"text": ""}) for c in e.chunks]})
        for e in full.entries
    ]
    assert len(table) == len(want) == len(TOPICS) + len(_cards())
    # one entry decoded alone equals the same entry of the one-pass load, in any order
    for i in reversed(range(len(want))):
        assert table[i] == want[i]
    assert table[-1] == want[-1] and table[1:3] == want[1:3]
    assert table[0] is table[0]  # decoded once: texts filled into it stay
    assert list(table) == want
    assert table.ids == [e.id for e in want]
    assert table.kinds == [e.kind for e in want]
    assert table.repos == [e.repo for e in want]
    assert table.dates == [e.date for e in want]
    assert table.tags == [e.tags for e in want]
    assert table.categories == [e.categories for e in want]
    assert table.titles == [e.title for e in want]
    assert table.chunk_ids == [[c.id for c in e.chunks] for e in want]
    with pytest.raises(IndexError):
        table[len(want)]
    # entries.jsonl is mapped, not read: a later index may remove the generation meanwhile
    again = G.load_generation(kb.home)
    assert again is not None and isinstance(again.entries, EntryTable)
    shutil.rmtree(again.path)
    assert again.entries[2] == want[2] and list(again.entries) == want
    assert again.entries.line(0) == table.line(0)
