"""The embedded store keeps each partition in a Chroma directory of its own
(`<home>/chroma-parts/`). A home indexed before that, with every partition in `<home>/chroma`,
keeps answering from it, and the next `kbase index` moves its vectors into the new layout from
the generation's vector files, without loading the model, then removes the old directory."""

from __future__ import annotations

import json
import shutil

import numpy as np
from conftest import pr_entry, write_topic_skills
from kbase.retrieval import generations as G
from kbase.retrieval import vectors as V
from kbase.retrieval.indexer import build_index

from kbase.api import KnowledgeBase

KEYS = ("skill", "pr--alpha")


def _cards():
    topics = ["paged kv cache decode", "fp8 blockwise gemm", "fused rmsnorm", "moe routing"]
    return [
        pr_entry("alpha", i + 1, f"{topics[i % 4]} step {i}", f"a{i:015d}", tags=["repo=alpha"])
        for i in range(12)
    ]


def _contents(store: V.VectorStore) -> dict:
    out = {}
    for key in KEYS:
        got = store._col(key, create=False).get(include=["embeddings", "metadatas"])
        out[key] = {
            i: (np.asarray(v), m)
            for i, v, m in zip(got["ids"], got["embeddings"], got["metadatas"], strict=True)
        }
    return out


def _make_legacy(home) -> dict:
    """Rewrite a freshly built home as an index built before chroma-parts/ looked."""
    store = V.VectorStore(home)
    before = _contents(store)
    store.close()
    old = V.VectorStore(home)
    old.legacy = True
    for key, rows in before.items():
        ids = list(rows)
        old.upsert(key, ids, np.stack([rows[i][0] for i in ids]), [rows[i][1] for i in ids])
    old.close()
    shutil.rmtree(home / V.PARTS_DIR)
    meta_file = G.gens_dir(home) / G.current_id(home) / "meta.json"
    meta = json.loads(meta_file.read_text())
    meta["vector_store"] = V.LEGACY_LAYOUT
    meta_file.write_text(json.dumps(meta))
    return before


def test_a_legacy_store_is_read_and_then_moved_without_embedding(tmp_path, embedder):
    root, home = tmp_path / "kb", tmp_path / "home"
    write_topic_skills(root)
    build_index(root, home, lambda: embedder, extra_entries=_cards())
    before = _make_legacy(home)
    assert (home / V.LEGACY_DIR / "chroma.sqlite3").is_file()

    # a reader of that generation asks the old directory
    vec = before["pr--alpha"][next(iter(before["pr--alpha"]))][0]
    store = V.VectorStore(home)
    assert store.query_each(vec.tolist(), [("pr--alpha", 3, None)]) == []  # nothing in parts
    store.read_layout(V.LEGACY_LAYOUT)
    hits = store.query_each(vec.tolist(), [("pr--alpha", 3, None)])
    store.close()
    assert len(hits) == 3 and hits[0][1] > 0.999
    kb = KnowledgeBase(root=root, home=home)
    kb.searcher().index()
    assert kb.searcher().store().legacy  # the searcher reads the layout its generation names
    assert kb.search("fp8 gemm with block scales", kind="pr", k=3)

    def no_model():
        raise AssertionError("moving the store must not embed anything")

    rep = build_index(root, home, no_model, extra_entries=_cards())
    assert rep.embedded_chunks == 0
    assert G.current_meta(home)["vector_store"] == V.LAYOUT
    assert not (home / V.LEGACY_DIR).exists()
    store = V.VectorStore(home)
    after = _contents(store)
    store.close()
    for key in KEYS:
        assert after[key].keys() == before[key].keys() and after[key]
        for cid, (v, md) in after[key].items():
            assert md == before[key][cid][1] and np.allclose(v, before[key][cid][0], atol=1e-6)
    # and the reader that held the old generation follows to the new one
    assert kb.search("fp8 gemm with block scales", kind="pr", k=3)
    assert not kb.searcher().store().legacy
