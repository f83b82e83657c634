"""A searcher's lazy view of a generation (retrieval/entry_table.py) against the full load, and a
generation written in the previous layout (entries-light.json) read and then written anew."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import TOPICS, pr_entry, write_topic_skills
from kbase.retrieval import generations as G
from kbase.retrieval.entry_table import EntryTable
from kbase.retrieval.indexer import build_index
from pydantic import TypeAdapter

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
    light = G.load_generation(kb.home, light=True)
    lazy = G.load_generation(kb.home, lazy=True)
    assert light is not None and lazy is not None and isinstance(lazy.entries, EntryTable)
    table = lazy.entries
    want = list(light.entries)
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
    again = G.load_generation(kb.home, lazy=True)
    assert again is not None and isinstance(again.entries, EntryTable)
    shutil.rmtree(again.path)
    assert again.entries[2] == want[2] and list(again.entries) == want
    assert again.entries.line(0) == table.line(0)


def test_previous_layout_searches_alike_and_is_written_anew_without_embedding(
    kb_root, tmp_path, embedder
):
    kb = _built(kb_root, tmp_path, embedder)
    questions = ["fp8 scale gemm", "transpose shared memory bank conflicts", "revert tma"]
    before = [[h.model_dump() for h in kb.search(q, k=4)] for q in questions]
    gid = G.current_id(kb.home)
    gen = G.load_generation(kb.home, light=True)
    assert gid and gen is not None
    # what an earlier kbase wrote: every light entry in one JSON array, format 1
    light = TypeAdapter(list[Entry]).dump_json(
        list(gen.entries), exclude={"__all__": {"chunks": {"__all__": {"text"}}}}
    )
    (gen.path / G.LIGHT).write_bytes(light)
    for name in ("entries.jsonl", "columns.json"):
        (gen.path / name).unlink()
    meta = json.loads((gen.path / "meta.json").read_text())
    (gen.path / "meta.json").write_text(json.dumps({**meta, "format": 1}))

    old = KnowledgeBase(root=kb_root, home=kb.home)
    old._embedder = embedder
    assert [[h.model_dump() for h in old.search(q, k=4)] for q in questions] == before
    rep = build_index(old.root, old.home, old.embedder, extra_entries=_cards())
    assert rep.embedded_entries == [] and rep.generation != gid
    assert json.loads((old.home / "gens" / rep.generation / "meta.json").read_text())["format"] == 2
    again = KnowledgeBase(root=kb_root, home=kb.home)
    assert [[h.model_dump() for h in again.search(q, k=4)] for q in questions] == before
