"""The embedded store keeps each partition in a Chroma directory of its own
(`<home>/chroma-parts/`). A home whose store is missing (written against another store, or
lost) gets its vectors back from the generation's vector files at the next `kbase index`,
without loading the model."""

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


def test_a_lost_store_is_filled_again_from_the_vector_files_without_embedding(tmp_path, embedder):
    root, home = tmp_path / "kb", tmp_path / "home"
    write_topic_skills(root)
    build_index(root, home, lambda: embedder, extra_entries=_cards())
    store = V.VectorStore(home)
    before = _contents(store)
    store.close()
    shutil.rmtree(home / V.PARTS_DIR)  # a store written elsewhere, or lost
    meta_file = G.gens_dir(home) / G.current_id(home) / "meta.json"
    meta = json.loads(meta_file.read_text())
    meta["vector_store"] = "elsewhere"
    meta_file.write_text(json.dumps(meta))

    def no_model():
        raise AssertionError("filling the store must not embed anything")

    rep = build_index(root, home, no_model, extra_entries=_cards())
    assert rep.embedded_chunks == 0
    assert G.current_meta(home)["vector_store"] == V.LAYOUT
    store = V.VectorStore(home)
    after = _contents(store)
    store.close()
    for key in KEYS:
        assert after[key].keys() == before[key].keys() and after[key]
        for cid, (v, _) in after[key].items():
            assert np.allclose(v, before[key][cid][0], atol=1e-6)
    kb = KnowledgeBase(root=root, home=home)
    kb.searcher().local_vectors = False  # asked of Chroma, not of the files
    assert kb.search("fp8 gemm with block scales", kind="pr", k=3, mode="dense")
