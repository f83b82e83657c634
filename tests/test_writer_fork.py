"""Store writers forked from the build (retrieval/writer_fork.py) rather than spawned: a build in
a fresh process, which has made no Chroma client, forks them; the store they leave holds every
vector the model made; nothing they print reaches the build's stdout; no child is left. A
process that has made a client spawns them instead, since a fork would inherit Chroma's runtime
without its threads.

The build runs in a subprocess of its own: the test process has made Chroma clients already."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = r"""
import hashlib, json, os, sys
from pathlib import Path
import numpy as np
from conftest import pr_entry, write_topic_skills
from kbase.retrieval.indexer import build_index, dense_chunks
from kbase.retrieval.vectors import VectorStore, partition_key
from procs import children

class HashEmbedder:
    # vectors from the text's digest: the test is about where they go, not what they mean
    full_length = 256
    def embed(self, texts, max_length=None):
        rows = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(384).astype(np.float32)
            rows.append(v / np.linalg.norm(v))
        return np.stack(rows)

root, home = Path(sys.argv[1]), Path(sys.argv[2])
write_topic_skills(root)
cards = [pr_entry("alpha" if i % 3 else "beta", i + 1, f"fp8 gemm step {i}", f"a{i:015d}")
         for i in range(40)]
rep = build_index(root, home, lambda: HashEmbedder(), extra_entries=cards)
left = [c for c in children() if c[1] != "Z"]
store = VectorStore(home)
emb = HashEmbedder()
from kbase.retrieval import dense_text as DT
from kbase.retrieval.generations import load_generation
gen = load_generation(home)
wrong, stored = 0, 0
for e in gen.entries:
    chunks = dense_chunks(e)
    if not chunks:
        continue
    got = store._col(partition_key(e.kind, e.repo), create=False).get(
        ids=[c.id for c in chunks], include=["embeddings"])
    stored += len(got["ids"])
    for cid, vec in zip(got["ids"], got["embeddings"]):
        c = next(c for c in chunks if c.id == cid)
        want = emb.embed([DT.dense_text(e, c)])[0]
        wrong += not np.allclose(vec, want, atol=1e-6)
store.close()
print(json.dumps({"start": rep.store_start, "writers": rep.store_writers,
                  "embedded": rep.embedded_chunks, "stored": stored, "wrong": wrong,
                  "left": len(left)}))
"""


def _run(tmp_path: Path, **env: str) -> tuple[dict, str]:
    tests = Path(__file__).resolve().parent
    full = {
        **os.environ,
        "KBASE_STORE_PROCESS_MIN_CHUNKS": "1",
        "KBASE_STORE_FORK": "",
        "KBASE_STORE_WRITERS": "2",
        "PYTHONPATH": os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")]),
        **env,
    }
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "kb"), str(tmp_path / "home")],
        capture_output=True,
        text=True,
        env=full,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout), out.stdout


def test_a_fresh_process_forks_its_writers_and_they_store_every_vector(tmp_path):
    got, stdout = _run(tmp_path)
    assert got["start"] == "forked" and got["writers"] == 2
    assert got["embedded"] > 40 and got["stored"] == got["embedded"]
    assert got["wrong"] == 0 and got["left"] == 0
    assert stdout.count("\n") == 1  # the JSON line alone: the children printed nowhere here


def test_spawned_writers_when_asked_store_the_same(tmp_path):
    got, _ = _run(tmp_path, KBASE_STORE_FORK="0")
    assert got["start"] == "spawned" and got["stored"] == got["embedded"] > 40
    assert got["wrong"] == 0 and got["left"] == 0


def test_a_process_with_a_chroma_client_does_not_fork(tmp_path):
    from kbase.retrieval.vectors import VectorStore
    from kbase.retrieval.writer_fork import fork_writers

    store = VectorStore(tmp_path / "home")
    store._col("skill", create=True)
    store.close()
    assert fork_writers() is False
