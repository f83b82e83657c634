"""The ONNX Runtime query embedder (retrieval/onnx_embed.py) of the shipped model: same vectors as
the torch model, used by KnowledgeBase.search without importing torch; the maintainer's export
(bench/onnx_export.py) it is made from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import write_skill, write_topic_skills
from kbase.retrieval import onnx_embed as OQ

from kbase.api import KnowledgeBase

HEAVY = ("torch", "transformers", "sentence_transformers")

LONG = " ".join(
    f"word{i} shared memory bank conflict warp shuffle" for i in range(100)
)  # ~600 words
QUERIES = [
    "warp reduction gives wrong sum",
    "How do I avoid shared-memory bank conflicts in a tiled transpose?",
    "共享内存 bank 冲突 转置",
    "线程束 归约 结果不对",
    "__shfl_down_sync(0xffffffff, val, offset)",
    "tl.dot input_precision='ieee' TF32",
    "  CUDA_ERROR_ILLEGAL_ADDRESS when pid * BLOCK_SIZE overflows int32  ",
    "triton.autotune(configs=[...], key=['M', 'N'], reset_to_zero=['c_ptr'])",
    "fp8 e4m3 vs e5m2 scaling — amax history?",
    LONG,
]

SEARCHES = [
    "__shfl_down_sync wrong sum",
    "共享内存 bank 冲突 转置",
    "tl.dot input_precision",
    "my matmul is slightly inaccurate",
    "kernel crashes on huge tensors",
]


def _cos_dist(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return 1.0 - float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory):
    return OQ.materialize(tmp_path_factory.mktemp("shipped"))


@pytest.fixture(scope="module")
def indexed(embedder, tmp_path_factory):
    """A tiny root indexed through KnowledgeBase, which writes the shipped model into home/onnx."""
    base = tmp_path_factory.mktemp("onnxkb")
    root = base / "kb"
    write_topic_skills(root)
    kb = KnowledgeBase(root=root, home=base / "home")
    rep = kb.index()
    assert not rep.problems
    return kb


def test_the_export_matches_torch_and_says_what_it_holds(embedder, tmp_path):
    """bench/onnx_export.py, the first step of remaking the shipped model."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import onnx_export as OX

    out = OX.export_onnx(embedder.model_path, tmp_path / "onnx", embedder=embedder)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["fingerprint"] == OX.model_fingerprint(embedder.model_path)
    assert meta["pooling"] == {
        "mode": "mean_tokens",
        "normalize": True,
        "max_seq_length": embedder.full_length,
        "dim": embedder.dim,
    }
    for f in meta["files"]:
        assert (out / f).is_file(), f
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs
    ox = OQ.OnnxQueryEmbedder(out)
    for q in QUERIES:
        assert _cos_dist(ox.embed_query(q), embedder.embed_query(q)) < OX.MAX_COS_DIST, q


def test_a_model_saved_by_this_sentence_transformers_exports(embedder, tmp_path):
    """sentence-transformers 6 writes `pooling_mode: mean` where older ones wrote
    `pooling_mode_mean_tokens: true`: a model fine-tuned and saved here (bench/train_embedder.py)
    still exports, with the same pooling."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import onnx_export as OX

    embedder.model.save(str(tmp_path / "saved"))
    assert OX.pooling_settings(tmp_path / "saved") == OX.pooling_settings(embedder.model_path)
    assert OX.pooling_settings(tmp_path / "saved")["mode"] == "mean_tokens"


def test_onnx_query_vectors_match_sentence_transformers(onnx_dir, embedder):
    ox = OQ.OnnxQueryEmbedder(onnx_dir)
    assert ox.dim == embedder.dim == 384
    assert (
        len(ox._tok.encode(LONG).ids) == embedder.full_length == 256
    )  # the long query is truncated
    for q in QUERIES:
        got, want = ox.embed_query(q), embedder.embed_query(q)
        assert len(got) == len(want)
        assert abs(np.linalg.norm(got) - 1.0) < 1e-5
        assert _cos_dist(got, want) < 1e-4, q
    batch = ox.embed_batch(QUERIES[:4])  # padded batch == one at a time
    for q, v in zip(QUERIES[:4], batch, strict=False):
        assert _cos_dist(v, ox.embed_query(q)) < 1e-6


def test_a_one_query_session_gives_the_same_vectors_unpacked(onnx_dir):
    """prepack=False (a CLI search's session: its weights are not packed for the matrix
    products) answers what a packed session does, to the last bits of a float32."""
    packed = OQ.OnnxQueryEmbedder(onnx_dir)
    unpacked = OQ.OnnxQueryEmbedder(onnx_dir, prepack=False)
    for q in QUERIES:
        assert _cos_dist(unpacked.embed_query(q), packed.embed_query(q)) < 1e-6, q
    a, b = packed.embed_batch(QUERIES[:4]), unpacked.embed_batch(QUERIES[:4])
    assert np.abs(a - b).max() < 1e-5


def test_search_uses_the_shipped_model_with_the_same_hits_as_torch(indexed, embedder):
    kb = indexed
    assert isinstance(kb.query_embedder(), OQ.OnnxQueryEmbedder)
    assert kb.query_embedder() is kb.query_embedder()  # cached on the instance

    torch_kb = KnowledgeBase(root=kb.root, home=kb.home)
    torch_kb._query_embedder = embedder  # the torch path, for comparison
    for q in SEARCHES:
        for mode in ("hybrid", "dense"):
            a = kb.search(q, k=4, mode=mode)
            b = torch_kb.search(q, k=4, mode=mode)
            assert a[0].id == b[0].id, (q, mode)
            if mode == "dense":
                assert [h.id for h in a] == [h.id for h in b], q
    assert kb.search("__shfl_down_sync wrong sum", k=1)[0].id == "warp-shuffle-sum"

    # A second index with nothing changed leaves the model files alone.
    before = (kb.home / "onnx" / "meta.json").stat().st_mtime_ns
    kb.index()
    assert (kb.home / "onnx" / "meta.json").stat().st_mtime_ns == before


def test_search_in_a_fresh_process_does_not_import_torch(indexed):
    kb = indexed
    code = textwrap.dedent(f"""
        import sys
        from kbase.api import KnowledgeBase
        kb = KnowledgeBase(root={str(kb.root)!r}, home={str(kb.home)!r})
        hits = kb.search("warp reduction gives wrong sum", k=2)
        dense = kb.search("my matmul is slightly inaccurate", k=1, mode="dense")
        heavy = [m for m in {HEAVY!r} if m in sys.modules]
        assert not heavy, heavy
        print(type(kb.query_embedder()).__name__, hits[0].id, dense[0].id)
    """)
    env = {k: v for k, v in os.environ.items() if k != "KBASE_MODEL"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["OnnxQueryEmbedder", "warp-shuffle-sum", "tl-dot-tf32"]


def test_a_model_of_ones_own_embeds_both_sides_with_torch(embedder, kb_root, tmp_path):
    write_skill(kb_root, "warp-shuffle-sum")
    kb = KnowledgeBase(root=kb_root, home=tmp_path / "home", model_path=embedder.model_path)
    rep = kb.index()
    assert rep.entries == 1 and rep.backend == "torch"
    assert not (kb.home / "onnx").exists()
    assert kb.query_embedder() is embedder
    assert kb.search("warp reduction gives wrong sum", k=1)[0].id == "warp-shuffle-sum"
