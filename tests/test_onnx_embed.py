"""Documents embedded by ONNX Runtime (retrieval/onnx_embed.py), the generation's vector files
(retrieval/vectors.py), and a search that needs neither chromadb nor bm25s."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import write_skill, write_topic_skills
from kbase.retrieval.onnx_embed import OnnxDocEmbedder, materialize

from kbase.api import KnowledgeBase

TEXTS = [
    "warp reduction gives wrong sum",
    "共享内存 bank 冲突 转置",
    "tl.dot(a, b, input_precision='ieee') " * 30,  # longer than the 128-token PR cut
    "fp8 e4m3 amax history and per-tensor scales",
    " ".join(f"tile{i} shared memory padding" for i in range(200)),  # past 256 tokens
]


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory):
    return materialize(tmp_path_factory.mktemp("onnxdoc"))


def test_onnx_documents_match_torch_at_every_length_limit(onnx_dir, embedder):
    ox = OnnxDocEmbedder(onnx_dir)
    for limit in (None, 128):
        a = ox.embed(TEXTS, max_length=limit)
        b = embedder.embed(TEXTS, max_length=limit)
        assert a.shape == b.shape == (len(TEXTS), embedder.dim)
        cos = (a * b).sum(axis=1)
        assert cos.min() >= 1 - 1e-4, (limit, cos)  # the export's own check
        # batched by length: the same vector as the text embedded alone
        alone = np.stack([ox.embed([t], max_length=limit)[0] for t in TEXTS])
        np.testing.assert_allclose(a, alone, atol=1e-5)
    assert ox.embed([]).shape == (0, embedder.dim)


def test_reindex_embeds_with_onnx_and_keeps_vector_files(embedder, tmp_path):
    root = tmp_path / "kb"
    write_topic_skills(root)
    kb = KnowledgeBase(root=root, home=tmp_path / "home")
    first = kb.index()
    assert not first.problems and (kb.home / "onnx" / "meta.json").is_file()
    write_skill(
        root, "graph-replay", description="Capture and replay CUDA graphs to cut launch cost."
    )
    second = kb.index()
    assert second.embedded_entries == ["graph-replay"] and second.backend == "onnxruntime"
    # the new generation's files hold every dense vector, the old ones hard-linked
    from kbase.retrieval import generations as G
    from kbase.retrieval.vectors import GenVectors

    gv = GenVectors(G.load_generation(kb.home).path)
    ids = {i for k in gv.parts for i in gv.ids(k)}
    chunk_ids = {c.id for e in G.load_generation(kb.home).entries for c in e.chunks}
    assert ids and ids <= chunk_ids and any(i.startswith("graph-replay::") for i in ids)
    third = kb.index()
    assert third.embedded_chunks == 0 and third.seconds["diff"] < 5
    # the embedded store and the files agree: same dense ranking with and without Chroma
    files_kb = KnowledgeBase(root=root, home=kb.home)
    chroma_kb = KnowledgeBase(root=root, home=kb.home)
    chroma_kb.searcher().local_vectors = False
    for q in ("cuda graph launch overhead", "warp reduction wrong sum", "bank conflicts"):
        a = [h.id for h in files_kb.search(q, k=4, mode="dense")]
        b = [h.id for h in chroma_kb.search(q, k=4, mode="dense")]
        assert a == b, q


def test_cold_search_imports_neither_chromadb_nor_bm25s(embedder, tmp_path):
    root = tmp_path / "kb"
    write_topic_skills(root)
    kb = KnowledgeBase(root=root, home=tmp_path / "home")
    kb.index()
    code = textwrap.dedent(f"""
        import sys
        from kbase.api import KnowledgeBase
        kb = KnowledgeBase(root={str(root)!r}, home={str(kb.home)!r})
        hits = kb.search("warp reduction gives wrong sum", k=2)
        tagged = kb.search("warp reduction", k=2, kind="skill")
        heavy = [m for m in ("chromadb", "bm25s", "scipy", "torch") if m in sys.modules]
        assert not heavy, heavy
        print(hits[0].id, tagged[0].id)
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("KBASE_MODEL", "KBASE_CHROMA_URL")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["warp-shuffle-sum", "warp-shuffle-sum"]


def test_int8_documents_get_their_own_vector_ids_and_answer_fp32_queries(
    embedder, tmp_path, monkeypatch
):
    from kbase.retrieval import generations as G
    from kbase.retrieval import onnx_embed as Q
    from kbase.retrieval.vectors import GenVectors

    def vectors(home):
        gv = GenVectors(G.load_generation(home).path)
        return {i: gv.matrix(k)[j] for k in gv.parts for j, i in enumerate(gv.ids(k))}

    root = tmp_path / "kb"
    write_topic_skills(root)
    monkeypatch.setenv("KBASE_INDEX_PRECISION", "fp32")
    kb = KnowledgeBase(root=root, home=tmp_path / "home")
    fp32 = kb.index()
    fp32_vecs = vectors(kb.home)
    assert G.load_generation(kb.home).meta["dense"].count(":") == 1  # the old recipe key
    assert not (kb.home / "onnx" / Q.INT8_FILE).exists()

    monkeypatch.setenv("KBASE_INDEX_PRECISION", "int8")
    kb = KnowledgeBase(root=root, home=kb.home)
    int8 = kb.index()
    # every vector embedded again under new ids: an index never mixes the two models
    assert int8.embedded_chunks == fp32.embedded_chunks > 0 and int8.backend == "onnxruntime"
    assert G.load_generation(kb.home).meta["dense"].endswith(f":{Q.RECIPE}")
    assert (kb.home / "onnx" / Q.INT8_FILE).is_file()
    int8_vecs = vectors(kb.home)
    assert len(int8_vecs) == len(fp32_vecs) and not set(int8_vecs) & set(fp32_vecs)
    stored = kb.vector_store()
    assert not stored.existing_ids("skill", list(fp32_vecs))  # the old ids were collected
    stored.close()
    # the same chunks, close to the fp32 vectors; fp32 queries still find the right skill
    by_chunk = {i.rsplit("::", 1)[-1] + i.split("::")[0]: v for i, v in fp32_vecs.items()}
    cos = [
        float(v @ by_chunk[i.rsplit("::", 1)[-1] + i.split("::")[0]]) for i, v in int8_vecs.items()
    ]
    assert min(cos) > 0.95, cos
    for q, want in (
        ("warp reduction gives wrong sum", "warp-shuffle-sum"),
        ("transpose is slow because of bank conflicts", "smem-bank-padding"),
        ("matmul in triton loses precision to tf32", "tl-dot-tf32"),
    ):
        assert kb.search(q, k=1, mode="dense")[0].id == want, q
    assert kb.index().embedded_chunks == 0  # int8 again: nothing to embed

    monkeypatch.setenv("KBASE_INDEX_PRECISION", "fp16")
    with pytest.raises(ValueError, match="KBASE_INDEX_PRECISION"):
        KnowledgeBase(root=root, home=kb.home).index()
