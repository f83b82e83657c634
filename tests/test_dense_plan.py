"""The dense retriever's plan per partition (retrieval/loaded.py), on a real index and a real
Chroma store: a large partition is asked of Chroma with as many hits as its own filtered share
needs, and when a filter keeps few of a large partition's rows those rows alone are scored from
the vector file (the embedded store keeps no metadata to filter by); with a Chroma server a rarer
tag becomes a `where`. Every route gives the exact answer here.

The thresholds that make a partition "large" are lowered so that a small index takes each route.
"""

from __future__ import annotations

import pytest
from conftest import pr_entry, write_topic_skills
from kbase.retrieval import loaded as D
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
    return idx.entry_mask(None, None, tags)


def test_plan_asks_each_large_partition_for_its_own_share(kb, monkeypatch):
    idx = kb.searcher().index()
    mask = _mask(idx, [TAG])
    plan = D.plan_dense(idx, None, None, [TAG], mask)
    # the topic skills have no such tag: their partition is left out
    assert [k for k, rows in plan.local] == ["pr--alpha", "pr--beta"] and not plan.asks

    monkeypatch.setattr(D, "LOCAL_MAX_ROWS", 0)
    plan = D.plan_dense(idx, None, None, [TAG], mask)
    rows = dict(plan.local)
    # the filter keeps 20 of alpha's 40 rows and 2 of beta's: those rows alone are scored
    assert len(rows["pr--alpha"]) == 20 and len(rows["pr--beta"]) == 2
    assert all(
        idx.entries[e].tags.count(TAG) for e in idx.row_entries("pr--beta")[rows["pr--beta"]]
    )

    monkeypatch.setattr(D, "LOCAL_MASKED_ROWS", 0)
    plan = D.plan_dense(idx, None, None, [TAG], mask)
    asks = {k: (n, where) for k, n, where in plan.asks}
    assert asks == {"pr--alpha": (2 * D.DENSE_PER_PARTITION, None)}  # share 0.5: twice the hits
    # share 0.05: its 2 rows scored exactly, however low the row threshold
    assert [(k, len(r)) for k, r in plan.local] == [("pr--beta", 2)]
    # with a Chroma server every partition is asked of it, and the rare tag is a `where`
    served = D.plan_dense(idx, None, None, [TAG], mask, local_vectors=False)
    asks = {k: (n, where) for k, n, where in served.asks}
    assert asks["pr--beta"] == (D.DENSE_PER_PARTITION, {f"t:{TAG}": True}) and not served.local
    unfiltered = D.plan_dense(idx, None, None, [], None)
    assert {n for _, n, w in unfiltered.asks} == {D.DENSE_PER_PARTITION} and not unfiltered.local


@pytest.mark.parametrize("tags", [[], [TAG]])
def test_every_route_returns_the_exact_dense_answer(kb, monkeypatch, tags):
    s = kb.searcher()
    idx = s.index()
    mask = _mask(idx, tags) if tags else None
    queries = ["fp8 gemm scaling", "decode attention over a paged kv cache", "top-p sampling"]

    def ids(q):
        return [idx.entries[e].id for e, _, _ in s._dense(idx, q, None, None, tags, mask)]

    exact = {q: ids(q) for q in queries}
    assert all(len(v) >= 10 for v in exact.values())
    if tags:
        assert all(TAG in idx.entries[idx.by_id[i]].tags for v in exact.values() for i in v)
    monkeypatch.setattr(D, "LOCAL_MAX_ROWS", 0)  # large partitions: masked rows, or Chroma
    assert {q: ids(q) for q in queries} == exact
    monkeypatch.setattr(D, "LOCAL_MASKED_ROWS", 0)  # large partitions: Chroma, rare tags exact
    for q in queries:
        assert ids(q)[:10] == exact[q][:10], q


def test_the_embedded_store_holds_no_metadata_and_a_server_holds_the_tags(
    tmp_path, embedder, chroma_server, monkeypatch
):
    root = tmp_path / "kb"
    write_topic_skills(root)
    cards = _cards("beta", 40, 20)

    def metadatas(kb):
        s = kb.searcher()
        s.index()  # the store's layout is the loaded generation's
        col = s.store()._col("pr--beta", create=False)
        return col.get(include=["metadatas"])["metadatas"]

    embedded = KnowledgeBase(root=root, home=tmp_path / "embedded")
    build_index(embedded.root, embedded.home, embedded.embedder, extra_entries=cards)
    assert len(metadatas(embedded)) == 40 and not any(metadatas(embedded))
    monkeypatch.setenv("KBASE_CHROMA_COLLECTION", "dense_plan")  # the server's own prefix
    served = KnowledgeBase(root=root, home=tmp_path / "served", chroma_url=chroma_server.url)
    build_index(served.root, served.home, served.embedder, chroma_server.url, extra_entries=cards)
    tagged = [m for m in metadatas(served) if m.get(f"t:{TAG}")]
    assert {m["entry_id"] for m in tagged} == {"pr:beta#1", "pr:beta#21"}
    # both answer a rare-tag search with the same cards, the server through its `where`
    monkeypatch.setattr(D, "LOCAL_MAX_ROWS", 0)
    monkeypatch.setattr(D, "LOCAL_MASKED_ROWS", 0)
    q = "paged kv cache decode attention"
    hits = [[h.id for h in kb.search(q, kind="pr", tags=[TAG], k=5)] for kb in (embedded, served)]
    assert hits[0] == hits[1] and sorted(hits[0]) == ["pr:beta#1", "pr:beta#21"]


class _Broken:
    """A vector store whose queries fail, at submit (`late=False`) or when collected."""

    def __init__(self, late: bool = False):
        self.late = late

    def submit_each(self, *args, **kwargs):
        def fail():
            raise RuntimeError("collection gone")

        if self.late:
            return fail
        fail()

    def close(self):
        pass


def test_a_failing_store_is_reopened_once_then_bm25_answers_alone(kb, monkeypatch, capsys):
    s = kb.searcher()
    s.index()
    vec, asks = s._embed("fp8 gemm scaling").tolist(), [("pr--alpha", 5, None)]
    want = s._query_store(vec, asks, False)()
    assert len(want) == 5
    for late in (False, True):  # another process re-indexed: reopened, asked again
        s._store = _Broken(late)
        assert s._query_store(vec, asks, True)() == want
    monkeypatch.setattr(s, "_store_factory", _Broken)  # reopening fails too: no dense rows
    for late in (False, True):
        s._store = _Broken(late)
        assert s._query_store(vec, asks, True)() == []
        err = capsys.readouterr().err
        assert "vector search failed (RuntimeError: collection gone); answering from BM25" in err
    monkeypatch.undo()
    s._reset_store()
