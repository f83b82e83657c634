"""What the embedding model sees for a PR card (retrieval/build_stages.py): the repeats, hashes,
counts and paths go, the facts stay; and a change of recipe re-embeds each card once."""

from __future__ import annotations

from pathlib import Path

from kbase.ingest.card_format import render_card
from kbase.retrieval import build_stages as DT
from kbase.retrieval.indexer import build_index
from mining_fixtures import load_card_entries

from kbase.schema import FileChange, PRCard, Tags


def _card(pr: int, title: str) -> PRCard:
    files = [
        FileChange(path="include/flashinfer/attention/prefill.cuh", added=700, deleted=600),
        FileChange(path="include/flashinfer/vec_dtypes.cuh", added=46, deleted=92),
    ]
    return PRCard(
        repo="demo",
        pr=pr,
        url=f"https://github.com/example/demo/pull/{pr}",
        sha=f"{pr:040x}",
        date="2024-08-27T10:00:00+00:00",
        title=title,
        families=["prefill"],
        files=files,
        totals={"files": 2, "added": 746, "deleted": 692},
        categories=["fix"],
        tags=Tags(kernel_types=["attention"], languages=["cuda-cpp"], archs=["sm75"]),
        description="Skip the prefill kernels on sm75 when the dtype is bf16: they do not build.",
    )


def _write(root: Path, card: PRCard) -> None:
    p = root / "pr_archive" / card.repo / f"{card.pr}.md"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(render_card(card))


def test_pr_text_drops_repeats_hashes_and_paths_but_keeps_the_facts(tmp_path):
    title = "hotfix: skip prefill kernels on sm75 for bf16"
    _write(tmp_path, _card(473, title))
    (entry,), problems = load_card_entries(tmp_path)
    assert not problems
    texts = {c.section: DT.dense_text(entry, c) for c in DT.dense_chunks(entry)}
    assert set(texts) == {"summary", "description"}
    summary = texts["summary"]
    full = next(c.text for c in entry.chunks if c.section == "summary")
    assert summary.count(title) == 1 and full.count(title) >= 1
    for fact in ("demo PR #473", "2024-08-27", "prefill", "fix", "attention", "cuda-cpp", "sm75"):
        assert fact in summary, fact
    for noise in (f"{473:040x}"[:10], "+746/-692", "vec_dtypes.cuh", "merged on"):
        assert noise in full and noise not in summary, noise
    assert summary.count("Categories:") == 1 and full.count("Categories:") == 2
    desc = texts["description"]
    assert (
        desc
        == f"{title}\nSkip the prefill kernels on sm75 when the dtype is bf16: they do not build."
    )
    assert len(summary) < len(f"{title}\n{full}") * 0.7


def test_a_new_recipe_re_embeds_each_card_once(tmp_path, embedder, monkeypatch):
    root = tmp_path / "kb"
    (root / "skills").mkdir(parents=True)
    _write(root, _card(1, "fuse the rope kernel into attention"))
    _write(root, _card(2, "fix bf16 prefill on sm75"))
    home = tmp_path / "home"

    def build():
        return build_index(root, home, lambda: embedder)

    first = build()
    assert first.embedded_chunks == 4 and build().embedded_chunks == 0
    monkeypatch.setattr(DT, "RECIPE", DT.RECIPE + "-next")
    assert build().embedded_chunks == 4
    assert build().embedded_chunks == 0
