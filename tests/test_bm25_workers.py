"""A large build tokenizes for BM25 in processes (retrieval/bm25_workers.py), spawned or, from the
build's forked BM25 child, forked; the index it writes must be byte for byte the one a single
process writes, also when a worker dies or fails."""

from __future__ import annotations

import pytest
from kbase.retrieval.lexical import build_bm25
from procs import children

from kbase.schema import Chunk

TEXTS = [
    "BatchPrefillWithPagedKVCache hangs on sm_90 with fp8 KV",
    "MLA decode kernel: split-k over the latent dim, 1.3x on H200",
    "fused_add_rmsnorm reads the residual twice",
    "分页 KV 缓存的解码注意力在 GQA 下变慢",
    "CUDA error: an illegal memory access was encountered",
    "",
]


def _chunks(n: int) -> tuple[list[Chunk], list[str]]:
    chunks, titles = [], []
    for i in range(n):
        eid = f"pr:alpha#{i}"
        text = TEXTS[i % len(TEXTS)] + ("" if i % 4 else f" step {i}")  # repeats and uniques
        chunks.append(
            Chunk(
                id=f"{eid}::0",
                entry_id=eid,
                kind="pr",
                section="summary",
                text=text,
                line=1,
                path=f"pr_archive/alpha/{i}.md",
            )
        )
        titles.append(f"title {i % 7}")
    return chunks, titles


def _workers() -> list[int]:
    """Spawned tokenize workers still alive (multiprocessing's resource tracker stays)."""
    return [
        pid for pid, _, cmd in children() if b"spawn_main" in cmd and b"resource_tracker" not in cmd
    ]


def _same_files(a, b) -> None:
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir()) and len(names) >= 8
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.mark.parametrize("fork", [False, True])
def test_tokenizing_in_processes_writes_the_same_index(tmp_path, fork):
    chunks, titles = _chunks(120)
    entry_titles = sorted(set(titles))
    build_bm25(chunks, titles, tmp_path / "one", entry_titles=entry_titles)
    build_bm25(
        chunks, titles, tmp_path / "pool", entry_titles=entry_titles, workers=3, fork_workers=fork
    )
    _same_files(tmp_path / "one", tmp_path / "pool")
    assert not _workers()  # the pool is shut down


def test_a_forked_worker_that_fails_leaves_the_same_index(tmp_path, monkeypatch):
    """The second shard's child raises: the first shard's ids stand, the rest is tokenized by
    the caller in order, and the third child is still read to its end."""
    import kbase.retrieval.bm25_workers as W

    chunks, titles = _chunks(300)
    entry_titles = sorted(set(titles))
    build_bm25(chunks, titles, tmp_path / "one", entry_titles=entry_titles)
    real = W.tokenize_shard
    pairs = [(t, c.text) for t, c in zip(titles, chunks, strict=True)]
    second = W._balanced(list(dict.fromkeys(pairs)), 3)[1]

    def second_fails(shard):
        if shard == second:
            raise RuntimeError("a tokenizer fell over")
        return real(shard)

    monkeypatch.setattr(W, "tokenize_shard", second_fails)
    got = W.tokenized_apart(pairs, {}, 3, fork=True)
    first = W._balanced(list(dict.fromkeys(pairs)), 3)[0]
    assert set(got) == set(first)  # the first shard only: the third is not merged past a gap
    build_bm25(
        chunks, titles, tmp_path / "pool", entry_titles=entry_titles, workers=3, fork_workers=True
    )
    _same_files(tmp_path / "one", tmp_path / "pool")


def _kill_first_worker(killed: list[int], stop) -> None:
    """SIGKILL the first process this one spawns (a tokenize worker) as soon as it appears."""
    import os
    import signal

    while not stop.is_set() and not killed:
        for pid, _, cmd in children():
            if b"spawn_main" in cmd:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                break
        stop.wait(0.005)


def test_a_worker_that_dies_leaves_the_same_index(tmp_path):
    import threading

    chunks, titles = _chunks(3000)
    entry_titles = sorted(set(titles))
    build_bm25(chunks, titles, tmp_path / "one", entry_titles=entry_titles)
    killed: list[int] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_kill_first_worker, args=(killed, stop))
    watcher.start()
    try:
        build_bm25(chunks, titles, tmp_path / "pool", entry_titles=entry_titles, workers=2)
    finally:
        stop.set()
        watcher.join()
    assert killed  # a worker did die under the build
    _same_files(tmp_path / "one", tmp_path / "pool")
