"""An incremental re-index (entries carried over undecoded, BM25 from the token cache, vectors
kept) against a fresh full index of the same root: same generation contents, same BM25 postings,
same vectors, same search answers, after each kind of change (issue #11)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import write_skill, write_topic_skills
from kbase.ingest.card_format import render_card
from kbase.retrieval import generations as G
from kbase.retrieval.indexer import build_index
from kbase.retrieval.lexical import TOKENS_FILE, Lexical, read_title_ids
from kbase.retrieval.vectors import GenVectors

from kbase.api import KnowledgeBase
from kbase.schema import FileChange, PRCard, Tags

QUERIES = [
    "shared memory bank conflicts transpose",
    "fp8 scale gemm epilogue",
    "warp shuffle reduction wrong sum",
    "paged kv cache prefill",
    "int64 offsets overflow",
]
# the files of a generation that must be byte for byte those of a fresh build
SAME_BYTES = ["entries.jsonl", "texts.jsonl", "texts.idx.json", "bm25/chunk_ids.txt"]


def _card(root: Path, n: int, title: str, notes: str = "", repo: str = "demo") -> Path:
    card = PRCard(
        repo=repo,
        pr=n,
        url=f"https://github.com/example/{repo}/pull/{n}",
        sha=f"{n:040x}",
        date=f"2024-0{1 + n % 9}-01T10:00:00+00:00",
        title=title,
        files=[FileChange(path=f"csrc/k{n}.cu", added=3, deleted=1, symbols=[f"kern_{n}"])],
        totals={"files": 1, "added": 3, "deleted": 1},
        categories=["perf" if n % 2 else "fix"],
        tags=Tags(kernel_types=["attention"], languages=["cuda-cpp"]),
    )
    p = root / "pr_archive" / repo / f"{n}.md"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(render_card(card, notes))
    return p


def _postings(bm25: Path) -> dict[str, tuple[list[int], list[float]]]:
    """token -> (chunk rows, scores): the BM25 index independent of vocabulary numbering."""
    lex = Lexical(bm25)
    out = {}
    for tok, t in lex.vocab.items():
        a, b = int(lex.indptr[t]), int(lex.indptr[t + 1])
        if b > a:
            out[tok] = (lex.indices[a:b].tolist(), lex.data[a:b].tolist())
    return out


def _title_tokens(bm25: Path) -> list[set[str]]:
    names = {i: t for t, i in Lexical(bm25).vocab.items()}
    got = read_title_ids(bm25)
    assert got is not None
    flat, off = got
    return [{names[int(i)] for i in flat[off[k] : off[k + 1]]} for k in range(len(off) - 1)]


def _assert_same_generation(a: Path, b: Path) -> None:
    for name in SAME_BYTES:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    for name in ("columns.json", "carry.json", "card_stats.json"):
        assert json.loads((a / name).read_text()) == json.loads((b / name).read_text()), name
    meta_a, meta_b = (json.loads((p / "meta.json").read_text()) for p in (a, b))
    assert meta_a == meta_b
    assert _postings(a / "bm25") == _postings(b / "bm25")
    assert _title_tokens(a / "bm25") == _title_tokens(b / "bm25")
    for q in QUERIES:
        assert np.array_equal(Lexical(a / "bm25").scores(q), Lexical(b / "bm25").scores(q)), q
    va, vb = GenVectors(a), GenVectors(b)
    assert va.ok and vb.ok and set(va.parts) == set(vb.parts)
    for key in va.parts:
        ids = va.ids(key)
        assert ids == vb.ids(key), key
        got_a, got_b = va.vectors_of(key, ids), vb.vectors_of(key, ids)
        for i in ids:
            assert np.allclose(got_a[i], got_b[i], atol=1e-5), i


def _compare_with_fresh(kb: KnowledgeBase, tmp_path: Path, embedder, step: str) -> None:
    fresh_home = tmp_path / f"fresh-{step}"
    build_index(kb.root, fresh_home, lambda: embedder)
    fresh = KnowledgeBase(root=kb.root, home=fresh_home)
    fresh._embedder = embedder
    inc, full = G.load_generation(kb.home, full=True), G.load_generation(fresh_home, full=True)
    assert inc is not None and full is not None
    assert [e.model_dump() for e in inc.entries] == [e.model_dump() for e in full.entries]
    _assert_same_generation(inc.path, full.path)
    for q in QUERIES:
        got = kb.search(q, k=8, auto_index=False)
        want = fresh.search(q, k=8, auto_index=False)
        assert [h.id for h in got] == [h.id for h in want], (step, q)
        assert [h.snippet for h in got] == [h.snippet for h in want], (step, q)
        assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-4)
    shutil.rmtree(fresh_home)


def test_incremental_reindex_equals_a_fresh_full_index(kb_root, tmp_path, embedder):
    write_topic_skills(kb_root)
    for n, title in enumerate(["Fix fp8 scale in the gemm epilogue", "Paged KV cache prefill"]):
        _card(kb_root, n + 1, title, notes="Why: the scale was read before the barrier.")
    _card(kb_root, 3, "Revert the TMA prefetch", repo="other")
    kb = KnowledgeBase(root=kb_root, home=tmp_path / "home")
    kb._embedder = embedder

    def reindex(step: str, embedded: list[str]) -> None:
        rep = build_index(kb.root, kb.home, lambda: embedder)
        assert rep.embedded_entries == embedded, step
        kb._searcher = None
        _compare_with_fresh(kb, tmp_path, embedder, step)

    first = build_index(kb.root, kb.home, lambda: embedder)
    assert first.entries == 7
    # a generation that predates the carry columns is decoded once, then written with them
    (kb.home / "gens" / first.generation / "carry.json").unlink()
    reindex("noop after an older layout", [])
    assert (kb.home / "gens" / G.current_id(kb.home) / "carry.json").exists()

    skill = kb_root / "skills" / "tl-dot-tf32" / "SKILL.md"
    skill.write_text(skill.read_text().replace("TF32 keeps 10 mantissa bits.", "TF32 drops bits."))
    reindex("skill edited", ["tl-dot-tf32"])

    _card(kb_root, 2, "Paged KV cache prefill", notes="Why: pages were read out of order.")
    why = "Why: the scale was read before the barrier."
    _card(kb_root, 1, "Fix fp8 scale in the gemm epilogue", notes=why)  # same text, new mtime
    reindex("card edited, another rewritten unchanged", ["pr:demo#2"])

    write_skill(kb_root, "grid-stride", description="Grid-stride loops cover any n in one launch.")
    _card(kb_root, 4, "Add a sampling kernel", repo="other")
    reindex("skill and card added", ["grid-stride", "pr:other#4"])

    shutil.rmtree(kb_root / "skills" / "int64-offsets")
    (kb_root / "pr_archive" / "demo" / "1.md").unlink()
    reindex("skill and card removed", [])

    # the BM25 token ids lost: every entry's chunks are tokenized again, carried ones decoded
    (kb.home / "gens" / G.current_id(kb.home) / "bm25" / TOKENS_FILE).unlink()
    skill.write_text(skill.read_text().replace("TF32 drops bits.", "TF32 drops 13 bits."))
    reindex("token ids lost", ["tl-dot-tf32"])

    # vectors of a carried entry lost (Chroma and the vector files): it is decoded and embedded
    store = kb.vector_store()
    lost = [
        i
        for i in {i for c in store._all_collections() for i in c.get(include=[])["ids"]}
        if i.startswith("smem-bank-padding::")
    ]
    store.delete("skill", set(lost))
    store.close()
    shutil.rmtree(kb.home / "gens" / G.current_id(kb.home) / "vectors")
    reindex("vectors lost", ["smem-bank-padding"])


def test_a_draft_named_like_a_skill_is_reported_not_a_crash(kb_root, tmp_path, embedder):
    """Two files making one entry id: the first is indexed, the second is a problem."""
    write_topic_skills(kb_root)
    draft = kb_root / "skills" / "_drafts" / "int64-offsets"
    draft.mkdir(parents=True)
    shutil.copy(kb_root / "skills" / "int64-offsets" / "SKILL.md", draft / "SKILL.md")
    rep = build_index(kb_root, tmp_path / "home", lambda: embedder)
    assert rep.entries == 4
    assert [(p.path, p.message) for p in rep.problems] == [
        (
            "skills/_drafts/int64-offsets/SKILL.md",
            "duplicate id 'int64-offsets' (also skills/int64-offsets/SKILL.md)",
        )
    ]
