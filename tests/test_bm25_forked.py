"""A large build's BM25 in a forked child (retrieval/forked.py, KBASE_BM25_PROCESS): the files it
writes are the thread's, byte for byte; what the child raises or how it dies reaches the parent
as an error that says so; and no child is left behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import pr_entry, write_topic_skills
from kbase.retrieval.forked import ForkedError, run_forked
from kbase.retrieval.generations import current_id
from kbase.retrieval.indexer import build_index
from procs import children


def _no_children() -> bool:
    """No child of this process, live or zombie, that run_forked started (xdist's own or other
    tests' children may exist: only those whose command line is this interpreter's count)."""
    mine = Path("/proc/self/cmdline").read_bytes()
    # a zombie has no command line left: any zombie child counts
    return not [pid for pid, state, cmd in children() if cmd == mine or state == "Z"]


def test_the_answer_comes_back():
    wait = run_forked(lambda: {"sum": sum(range(1000)), "pid": os.getpid()}, "sum")
    got = wait()
    assert got["sum"] == 499500 and got["pid"] != os.getpid() and wait.cpu_s >= 0
    assert _no_children()


def test_an_error_in_the_child_names_its_cause():
    def broken():
        raise ValueError("the tokenizer table is torn")

    with pytest.raises(ForkedError, match="bm25 failed in its child process: ValueError: the tok"):
        run_forked(broken, "bm25")()
    assert _no_children()


def test_a_child_that_dies_is_reported_not_awaited_forever():
    with pytest.raises(ForkedError, match="died before it answered"):
        run_forked(lambda: os._exit(9), "bm25")()
    assert _no_children()


def test_a_child_never_waited_for_leaves_no_zombie():
    run_forked(lambda: 1, "ignored")
    assert _no_children()


def _bm25_files(root: Path, home: Path, embedder, forked: str) -> dict[str, bytes]:
    os.environ["KBASE_STORE_PROCESS_MIN_CHUNKS"] = "1"  # the large build's route
    os.environ["KBASE_BM25_PROCESS"] = forked
    os.environ["KBASE_BM25_WORKERS"] = "0"
    cards = [pr_entry("alpha", i + 1, f"fused rmsnorm step {i}", f"a{i:015d}") for i in range(12)]
    try:
        rep = build_index(root, home, lambda: embedder, None, extra_entries=cards)
    finally:
        for k in ("KBASE_STORE_PROCESS_MIN_CHUNKS", "KBASE_BM25_PROCESS", "KBASE_BM25_WORKERS"):
            del os.environ[k]
    assert "bm25_thread" in rep.seconds and rep.bm25 == ("process" if forked == "1" else "thread")
    # a forked child's CPU is reported, since no rusage of this process holds it
    assert ("bm25_child_cpu" in rep.seconds) == (forked == "1")
    bm25 = home / "gens" / str(current_id(home)) / "bm25"
    return {p.name: p.read_bytes() for p in sorted(bm25.iterdir())}


def test_forked_bm25_writes_what_the_thread_writes(tmp_path, embedder):
    root = tmp_path / "kb"
    write_topic_skills(root)
    forked = _bm25_files(root, tmp_path / "forked", embedder, "1")
    thread = _bm25_files(root, tmp_path / "thread", embedder, "0")
    assert len(forked) >= 4 and forked == thread
