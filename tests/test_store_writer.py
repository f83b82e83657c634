"""Chroma's inserts in a process of their own (retrieval/store_writer.py): a build that sends its
vectors through the writer process leaves the store holding exactly what an inline build leaves,
a writer that fails says why instead of hanging, and a build that fails stops its writer.

The threshold is lowered (KBASE_STORE_PROCESS_MIN_CHUNKS) so that a small index takes the route a
large build takes. The writers are spawned here (KBASE_STORE_FORK=0): whether this process may
fork them depends on the tests before (test_writer_fork.py covers forked writers)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from conftest import pr_entry, write_topic_skills
from kbase.retrieval.indexer import build_index
from kbase.retrieval.store_writer import StoreWriter, StoreWriterError
from kbase.retrieval.vectors import PARTS_DIR, VectorStore, part_dir
from procs import children

from kbase.api import KnowledgeBase


def _cards():
    topics = ["paged kv cache decode", "fp8 blockwise gemm", "fused rmsnorm", "moe routing"]
    return [
        pr_entry("alpha", i + 1, f"{topics[i % 4]} step {i}", f"a{i:015d}", tags=["repo=alpha"])
        for i in range(24)
    ]


def _build(
    root: Path,
    home: Path,
    embedder,
    threshold: int,
    chroma_url: str | None = None,
    writers: int = 1,
):
    os.environ["KBASE_STORE_PROCESS_MIN_CHUNKS"] = str(threshold)
    os.environ["KBASE_STORE_WRITERS"] = str(writers)
    try:
        return build_index(root, home, lambda: embedder, chroma_url, extra_entries=_cards())
    finally:
        del os.environ["KBASE_STORE_PROCESS_MIN_CHUNKS"], os.environ["KBASE_STORE_WRITERS"]


def _stored(home: Path, chroma_url: str | None = None, collection: str | None = None):
    store = VectorStore(home, chroma_url, collection)
    try:
        out = {}
        for key in ("skill", "pr--alpha"):
            col = store._col(key, create=False)
            got = col.get(include=["embeddings", "metadatas"])
            out[key] = {
                i: (np.asarray(v), m)
                for i, v, m in zip(got["ids"], got["embeddings"], got["metadatas"], strict=True)
            }
        return out
    finally:
        store.close()


def _children() -> list[str]:
    """Command lines of this process's live children."""
    return [cmd.replace(b"\0", b" ").decode() for _, _, cmd in children()]


@pytest.fixture(autouse=True)
def spawned_writers(monkeypatch):
    monkeypatch.setenv("KBASE_STORE_FORK", "0")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("writer") / "kb"
    write_topic_skills(root)
    return root


@pytest.mark.parametrize("writers", [1, 2])
def test_writer_process_stores_what_an_inline_build_stores(root, tmp_path, embedder, writers):
    via = _build(root, tmp_path / "via", embedder, threshold=1, writers=writers)
    inline = _build(root, tmp_path / "inline", embedder, threshold=10**9)
    assert "store_writer" in via.seconds and "store_writer" not in inline.seconds
    # two partitions (skills, PR repo alpha): with two writers each has a process of its own
    assert (via.store_writers, inline.store_writers) == (writers, 0)
    assert via.embedded_chunks == inline.embedded_chunks > 24
    a, b = _stored(tmp_path / "via"), _stored(tmp_path / "inline")
    for key in a:
        assert a[key].keys() == b[key].keys() and a[key]
        for cid, (vec, md) in a[key].items():
            assert md == b[key][cid][1]
            assert np.allclose(vec, b[key][cid][0], atol=1e-6)
    # each partition in a Chroma directory of its own, holding that partition alone
    dirs = sorted(p.name for p in (tmp_path / "via" / PARTS_DIR).iterdir())
    assert dirs == sorted(part_dir(tmp_path / "via", k).name for k in a)
    # and searches answer the same from either home
    hits = []
    for home in ("via", "inline"):
        kb = KnowledgeBase(root=root, home=tmp_path / home)
        hits.append([h.id for h in kb.search("fp8 gemm with block scales", kind="pr", k=5)])
    assert hits[0] == hits[1] and hits[0]
    assert not [c for c in _children() if "store_writer" in c]


def test_writer_process_with_a_chroma_server(root, tmp_path, embedder, chroma_server):
    os.environ["KBASE_CHROMA_COLLECTION"] = "writer_test"
    try:
        rep = _build(
            root, tmp_path / "home", embedder, threshold=1, chroma_url=chroma_server.url, writers=2
        )
        stored = _stored(tmp_path / "home", chroma_server.url, "writer_test")
    finally:
        del os.environ["KBASE_CHROMA_COLLECTION"]
    assert "store_writer" in rep.seconds and rep.store_writers == 2
    assert len(stored["pr--alpha"]) == 24 and stored["skill"]
    assert not (tmp_path / "home" / PARTS_DIR).exists()  # the server holds every partition


def test_a_failing_writer_says_why(tmp_path):
    blocker = tmp_path / "home"
    blocker.write_text("a file where the home should be")
    writer = StoreWriter(blocker, None)
    writer.upsert("skill", ["x::0"], np.ones((1, 4), dtype=np.float32), [{"kind": "skill"}])
    with pytest.raises(StoreWriterError, match="failed: .*(exists|directory)"):
        writer.finish()


def test_a_failed_build_stops_its_writer(root, tmp_path, embedder):
    class Dies:
        full_length = embedder.full_length

        def embed(self, texts, max_length=None):
            raise RuntimeError("the model fell over")

    os.environ["KBASE_STORE_PROCESS_MIN_CHUNKS"] = "1"
    try:
        with pytest.raises(RuntimeError, match="fell over"):
            build_index(root, tmp_path / "home", lambda: Dies(), extra_entries=_cards())
    finally:
        del os.environ["KBASE_STORE_PROCESS_MIN_CHUNKS"]
    assert not [c for c in _children() if "store_writer" in c]


def test_queued_upserts_go_as_fewer_calls_and_store_the_same(tmp_path):
    """Upserts that queue up while the child starts (it imports chromadb first) are merged, a
    partition's at a time: the store ends up with every row, a repeated id keeps the vector
    sent last, and rows with metadata never merge with rows without."""
    rng = np.random.default_rng(7)
    writer = StoreWriter(tmp_path / "home", None)
    sent: dict[str, dict[str, np.ndarray]] = {"pr--alpha": {}, "pr--beta": {}}
    calls = 0
    for b in range(30):
        key = "pr--alpha" if b % 10 else "pr--beta"
        ids = [f"{key}-{b}-{i}" for i in range(8)]
        # 12 KB each: the pipe (64 KB) fills long before the child reads, so the rest queue
        vecs = rng.standard_normal((8, 384)).astype(np.float32)
        writer.upsert(key, ids, vecs, None)
        sent[key].update(zip(ids, vecs, strict=True))
        calls += 1
    again = rng.standard_normal((1, 384)).astype(np.float32)
    writer.upsert("pr--alpha", ["pr--alpha-1-0"], again, None)  # the same id a second time
    sent["pr--alpha"]["pr--alpha-1-0"] = again[0]
    writer.upsert("pr--alpha", ["tagged"], again, [{"kind": "pr"}])
    calls += 2
    writer.finish()
    assert 2 <= writer.applied < calls  # "open" is one of them
    store = VectorStore(tmp_path / "home", None)
    try:
        for key, rows in sent.items():
            got = store._col(key, create=False).get(include=["embeddings", "metadatas"])
            stored = dict(zip(got["ids"], got["embeddings"], strict=True))
            assert stored.keys() - {"tagged"} == rows.keys()
            for cid, vec in rows.items():
                assert np.allclose(stored[cid], vec, atol=1e-6), cid
        got = store._col("pr--alpha", create=False).get(ids=["tagged"], include=["metadatas"])
        assert got["metadatas"] == [{"kind": "pr"}]
    finally:
        store.close()
