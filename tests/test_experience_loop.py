"""The experience loop as library code: feedback log and draft skills, on real files."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from conftest import write_skill

from kbase.drafts import DRAFT_STATUS, DraftError, find_draft_files, propose
from kbase.feedback import MAX_NUDGE, FeedbackError, append, log_path, rerank, summaries
from kbase.schema import Hit


@pytest.fixture
def root(tmp_path) -> Path:
    write_skill(tmp_path, "warp-shuffle-mask")
    return tmp_path


def test_feedback_appends_and_summarises(root):
    append(root, "warp-shuffle-mask", "helpful", "fixed my reduction", source="cli")
    append(root, "warp-shuffle-mask", "outdated", "triton 3.9 renamed the API", source="mcp")
    lines = log_path(root).read_text().splitlines()
    assert [json.loads(x)["verdict"] for x in lines] == ["helpful", "outdated"]
    s = summaries(root)["warp-shuffle-mask"]
    assert s.counts == {"helpful": 1, "harmful": 0, "outdated": 1}
    assert s.recent[0]["note"] == "triton 3.9 renamed the API"  # newest first
    before = log_path(root).read_text()
    append(root, "warp-shuffle-mask", "harmful", "")
    assert log_path(root).read_text().startswith(before)  # append-only


@pytest.mark.parametrize(
    "verdict, note, match",
    [
        ("great", "", "verdict must be one of"),
        ("helpful", "x" * 1001, "limit is 1000"),
        ("helpful", "bell\x07", "control characters"),
        ("helpful", 5, "note must be a string"),
    ],
)
def test_feedback_input_is_checked(root, verdict, note, match):
    with pytest.raises(FeedbackError, match=match):
        append(root, "warp-shuffle-mask", verdict, note)
    assert not log_path(root).exists()


def test_concurrent_appends_lose_nothing(root):
    def worker(i: int) -> None:
        for j in range(25):
            append(root, "warp-shuffle-mask", "helpful", f"w{i} n{j}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = log_path(root).read_text().splitlines()
    assert len(lines) == 200 and all(json.loads(x)["id"] == "warp-shuffle-mask" for x in lines)


def _hit(i: str, score: float) -> Hit:
    return Hit(
        id=i,
        kind="skill",
        title=i,
        score=score,
        status="verified",
        path="p",
        line=1,
        section="",
        snippet="",
    )


def test_feedback_is_a_mild_ranking_signal(root):
    hits = [_hit("a", 1.0), _hit("b", 0.97), _hit("c", 0.5)]
    assert [h.id for h in rerank(hits, root)] == ["a", "b", "c"]
    for _ in range(10):
        append(root, "a", "harmful")
        append(root, "b", "helpful")
        append(root, "c", "helpful")
    s = summaries(root)
    assert 1 - MAX_NUDGE <= s["a"].nudge() < 1 < s["b"].nudge() <= 1 + MAX_NUDGE
    # near-ties flip; a hit far behind stays behind however much it is liked
    assert [h.id for h in rerank(hits, root)] == ["b", "a", "c"]
    assert [h.score for h in hits] == [1.0, 0.97, 0.5]  # scores are not rewritten


def test_propose_writes_a_draft_that_lints(root):
    from kbase.ingest.skills import lint_paths, load_skill

    d = propose(
        root,
        title="Triton kernel crashes with illegal memory access on the last block",
        symptom="RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "only when N is not a multiple of BLOCK=128",
        cause="the tail block's loads had no mask, so lanes past N read out of bounds",
        fix="mask every tl.load and tl.store with offs < N and pass other=0.0",
        tags={"languages": ["triton"]},
    )
    f = root / d.path
    assert f.parent.parent == root / "skills" / "_drafts" and find_draft_files(root) == [f]
    assert lint_paths([f], root) == []
    skill = load_skill(f, root)
    assert skill.name == d.name and len(d.name) <= 48
    assert "illegal memory access" in " ".join(skill.meta.trigger)
    # without a proposed check the snippet skips (exit 77): a draft can never pass by default
    assert "SystemExit(77)" in f.read_text()
    assert d.as_dict()["status"] == DRAFT_STATUS


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"title": ""}, "title is required"),
        ({"title": "a\nb"}, "one line"),
        ({"cause": "x" * 2001}, "limit is 2000"),
        ({"fix": "run ```rm -rf /```"}, "code fence"),
        ({"name": "../../etc"}, "kebab-case"),
        ({"name": "warp-shuffle-mask"}, "exists already"),
        ({"tags": {"archs": ["not-an-arch"]}}, "tags"),
        ({"symptom": "nul\x00"}, "control characters"),
    ],
)
def test_propose_validates_input(root, kw, match):
    args = dict(title="Some title", symptom="it breaks", cause="a cause", fix="a fix")
    args.update(kw)
    with pytest.raises(DraftError, match=match):
        propose(root, **args)
    assert find_draft_files(root) == []


def test_propose_refuses_a_second_draft_of_the_same_name(root):
    args = dict(title="Same title", symptom="s", cause="c", fix="f")
    propose(root, **args)
    with pytest.raises(DraftError, match="draft named"):
        propose(root, **args)
