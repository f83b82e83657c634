"""The dense retriever's plan per partition (retrieval/dense.py), on a real index and a real
Chroma server: without a server every partition the filter needs is scored from the vector
files; a server is asked for as many hits of each partition as its own filtered share needs, a
rarer tag becoming a `where`. Both routes give the same answer here.
"""

from __future__ import annotations

import pytest
from conftest import pr_entry, write_topic_skills
from kbase.retrieval import dense as D
from kbase.retrieval.indexer import build_index

from kbase.api import KnowledgeBase
from kbase.schema import Entry

TAG = "languages=cuda-cpp"
TOPICS = [
    "paged kv cache decode attention",
    "fp8 blockwise gemm scaling",
    "rmsnorm fused into the prologue",
    "moe expert routing and token permutation",
    "sampling kernel top-p with rejection",
    "rotary embedding for long context",
    "allreduce fusion across tensor parallel ranks",
    "sliding window attention mask",
]


def _cards(repo: str, n: int, tag_every: int) -> list[Entry]:
    return [
        pr_entry(
            repo,
            i + 1,
            f"{TOPICS[i % len(TOPICS)]} in {repo}, step {i // len(TOPICS)}",
            f"{repo}{i:04d}".ljust(16, "0"),
            tags=[f"repo={repo}"] + ([TAG] if i % tag_every == 0 else []),
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def kb(tmp_path_factory, embedder):
    root = tmp_path_factory.mktemp("dense") / "kb"
    write_topic_skills(root)
    kb = KnowledgeBase(root=root, home=root.parent / "home")
    cards = _cards("alpha", 40, 2) + _cards("beta", 40, 20)  # tag share 0.5 and 0.05
    build_index(kb.root, kb.home, kb.embedder, extra_entries=cards)
    return kb


def _mask(idx, tags):
    return idx.entry_mask(None, None, tags), (None, None, tuple(tags), None, None)


def test_plan_scores_the_files_or_asks_each_partition_for_its_own_share(kb):
    idx = kb.searcher().index()
    mask, key = _mask(idx, [TAG])
    plan = D.plan_dense(idx, None, None, [TAG], mask, key)
    # the topic skills have no such tag: their partition is left out
    assert plan.local == ["pr--alpha", "pr--beta"] and not plan.asks
    # with a Chroma server every partition is asked of it: alpha (share 0.5) for twice the
    # hits, beta (share 0.05) through its rare tag as a `where`
    served = D.plan_dense(idx, None, None, [TAG], mask, key, local_vectors=False)
    asks = {k: (n, where) for k, n, where in served.asks}
    assert asks == {
        "pr--alpha": (2 * D.DENSE_PER_PARTITION, None),
        "pr--beta": (D.DENSE_PER_PARTITION, {f"t:{TAG}": True}),
    }
    assert not served.local
    unfiltered = D.plan_dense(idx, None, None, [], None, local_vectors=False)
    assert {n for _, n, w in unfiltered.asks} == {D.DENSE_PER_PARTITION} and not unfiltered.local


def test_the_files_and_a_server_holding_the_tags_answer_alike(
    tmp_path, embedder, chroma_server, monkeypatch
):
    root = tmp_path / "kb"
    write_topic_skills(root)
    cards = _cards("beta", 40, 20)
    files = KnowledgeBase(root=root, home=tmp_path / "files")
    build_index(files.root, files.home, files.embedder, extra_entries=cards)
    assert files.vector_store() is None and not (files.home / "chroma-parts").exists()
    monkeypatch.setenv("KBASE_CHROMA_COLLECTION", "dense_plan")  # the server's own prefix
    served = KnowledgeBase(root=root, home=tmp_path / "served", chroma_url=chroma_server.url)
    build_index(served.root, served.home, served.embedder, chroma_server.url, extra_entries=cards)
    col = served.searcher().store()._col("pr--beta", create=False)
    tagged = [m for m in col.get(include=["metadatas"])["metadatas"] if m.get(f"t:{TAG}")]
    assert {m["entry_id"] for m in tagged} == {"pr:beta#1", "pr:beta#21"}
    # both answer a rare-tag search with the same cards, the server through its `where`
    q = "paged kv cache decode attention"
    hits = [[h.id for h in kb.search(q, kind="pr", tags=[TAG], k=5)] for kb in (files, served)]
    assert hits[0] == hits[1] and sorted(hits[0]) == ["pr:beta#1", "pr:beta#21"]
    dense = [[h.id for h in kb.search(q, mode="dense", k=10)] for kb in (files, served)]
    assert dense[0] == dense[1]
