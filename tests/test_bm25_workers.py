"""A large build tokenizes for BM25 in a pool of processes (retrieval/lexical.py); the index it
writes must be byte for byte the one a single process writes."""

from __future__ import annotations

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


def test_tokenizing_in_processes_writes_the_same_index(tmp_path):
    chunks, titles = _chunks(120)
    entry_titles = sorted(set(titles))
    build_bm25(chunks, titles, tmp_path / "one", entry_titles=entry_titles)
    build_bm25(chunks, titles, tmp_path / "pool", entry_titles=entry_titles, workers=2)
    one = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert one == sorted(p.name for p in (tmp_path / "pool").iterdir()) and len(one) >= 8
    for name in one:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "pool" / name).read_bytes(), (
            name
        )


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
    for p in (tmp_path / "one").iterdir():
        assert p.read_bytes() == (tmp_path / "pool" / p.name).read_bytes(), p.name
