"""The real-problem question set of issue #25 (bench/realprobs.yaml): its shape, its split rule and
its loader's errors. Retrieval quality on it is measured by bench/bench_realprobs.py."""

from __future__ import annotations

import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import realprobs as R  # noqa: E402

SET = REPO / "bench" / "realprobs.yaml"
SKILLS = {p.name for p in (REPO / "skills").iterdir() if (p / "SKILL.md").exists()}


@pytest.fixture(scope="module")
def probs():
    return R.load(SET, SKILLS)


def test_set_is_large_spread_and_keeps_uncovered_problems(probs):
    assert len(probs) >= 150
    repos = {p.repo for p in probs}
    named = {
        "triton-lang/triton", "pytorch/pytorch", "vllm-project/vllm", "sgl-project/sglang",
        "Dao-AILab/flash-attention", "flashinfer-ai/flashinfer", "NVIDIA/cutlass",
        "deepseek-ai/DeepGEMM", "InternLM/lmdeploy", "linkedin/Liger-Kernel",
        "fla-org/flash-linear-attention",
    }  # fmt: skip
    assert len(named & repos) >= 10, named - repos
    assert len({p.kind for p in probs}) >= 8
    for half in ("tune", "test"):
        rows = [p for p in probs if p.half == half]
        assert sum(not p.uncovered_at_collection for p in rows) >= 40, half
        # kept as collected: problems no skill fixed then stay in the set after skills are
        # written for them (fixing_new), so coverage can be measured before and after
        assert sum(p.uncovered_at_collection for p in rows) >= 15, half


def test_split_is_by_date_and_repository_not_by_row(probs):
    for p in probs:
        assert p.half == R.split_for(p.date, p.repo), p.id
    held = [p for p in probs if p.repo in R.HELD_OUT_REPOS]
    assert held and all(p.half == "test" for p in held)
    tune_dates = [p.date for p in probs if p.half == "tune"]
    assert max(tune_dates) < R.CUTOFF


def _write(tmp_path, row: str):
    f = tmp_path / "set.yaml"
    f.write_text("# header\n\n" + row, encoding="utf-8")
    return f


GOOD = """- id: x-1
  repo: a/b
  url: https://github.com/a/b/issues/1
  date: '2024-01-02'
  kind: nan
  query: "NaN after softmax"
  root_cause: "whole row masked"
  fixing: [triton-stable-softmax]
  split: tune
"""


def test_loader_names_file_line_and_field(tmp_path):
    assert R.load(_write(tmp_path, GOOD), SKILLS)[0].expected == ("triton-stable-softmax",)
    cases = {
        "split": GOOD.replace("split: tune", "split: test"),
        "kind": GOOD.replace("kind: nan", "kind: oops"),
        "fixing": GOOD.replace("triton-stable-softmax]", "no-such-skill]"),
        "query": GOOD.replace('"NaN after softmax"', '"' + "x" * 301 + '"'),
        "root_cause": GOOD.replace('  root_cause: "whole row masked"\n', ""),
        "calibration": GOOD + "  calibration: maybe\n",
        "batch": GOOD + "  batch: fresh-99\n",
        "literal_in_skill": GOOD + "  literal_in_skill: yes please\n",
    }
    for field, text in cases.items():
        with pytest.raises(ValueError, match=rf"set\.yaml:3: \[{field}\]"):
            R.load(_write(tmp_path, text), SKILLS)


def test_rejudged_skills_take_precedence(tmp_path):
    text = GOOD.replace(
        "fixing: [triton-stable-softmax]", "fixing: []\n  fixing_new: [gpu-kernel-timing]"
    )
    assert R.load(_write(tmp_path, text), SKILLS)[0].expected == ("gpu-kernel-timing",)


def test_rejudged_skills_are_validated(tmp_path):
    rejudged = GOOD.replace("fixing: [triton-stable-softmax]", "fixing: []\n  fixing_new: [nope]")
    with pytest.raises(ValueError, match=r"set\.yaml:3: \[fixing_new\] unknown skills \['nope'\]"):
        R.load(_write(tmp_path, rejudged), SKILLS)
    not_list = GOOD.replace(
        "fixing: [triton-stable-softmax]", "fixing: []\n  fixing_new: gpu-kernel-timing"
    )
    with pytest.raises(ValueError, match=r"set\.yaml:3: \[fixing_new\] must be a list"):
        R.load(_write(tmp_path, not_list), SKILLS)
    # a stale name in `fixing` is reported even when `fixing_new` overrides it
    stale = GOOD.replace("triton-stable-softmax]", "gone]\n  fixing_new: [gpu-kernel-timing]")
    with pytest.raises(ValueError, match=r"set\.yaml:3: \[fixing\] unknown skills"):
        R.load(_write(tmp_path, stale), SKILLS)


def test_calibration_rows_are_tune_rows_no_trigger_repeats(probs, tmp_path):
    """Rows that estimate quality on new problems must stay new to the skills: no skill may carry
    a trigger written from one of them (its query, word for word), and only the tune half may
    hold them."""
    import yaml

    cal = [p for p in probs if p.calibration]
    assert len(cal) >= 40 and all(p.half == "tune" for p in cal)
    assert sum(not p.covered for p in cal) >= 5  # the threshold needs uncovered rows too
    triggers = set()
    for skill in SKILLS:
        front = (REPO / "skills" / skill / "SKILL.md").read_text(encoding="utf-8").split("---")[1]
        for t in yaml.safe_load(front).get("trigger") or []:
            triggers.add(str(t["literal"] if isinstance(t, dict) else t).strip().lower())
    assert not [p.id for p in cal if p.query.strip().lower() in triggers]
    test_row = GOOD.replace("split: tune", "split: test").replace("2024-01-02", "2026-01-02")
    with pytest.raises(ValueError, match=r"\[calibration\] only tune rows"):
        R.load(_write(tmp_path, test_row + "  calibration: true\n"), SKILLS)


# minimum rows and repositories per collection batch (each batch is measured on its own)
FRESH_MIN = {"fresh-35": (60, 10), "fresh-36": (50, 10)}


@pytest.mark.parametrize("batch", sorted(FRESH_MIN))
def test_fresh_batch_rows_are_known_spread_and_calibrate_on_tune(probs, tmp_path, batch):
    """Each fresh batch (collected after trigger writing) names a known batch, has rows in both
    halves (at least half of them test), keeps uncovered problems, records literal_in_skill on
    every row, and its tune rows calibrate: nothing may be written from them."""
    assert set(FRESH_MIN) == R.BATCHES and {p.batch for p in probs} <= R.BATCHES | {""}
    fresh = [p for p in probs if p.batch == batch]
    rows, repos = FRESH_MIN[batch]
    assert len(fresh) >= rows and len({p.repo for p in fresh}) >= repos
    assert {p.half for p in fresh} == {"tune", "test"}
    if batch != "fresh-35":  # fresh-35 predates the rule
        assert 2 * sum(p.half == "test" for p in fresh) >= len(fresh)
    assert all(p.calibration for p in fresh if p.half == "tune")
    assert all(isinstance(p.literal_in_skill, bool) for p in fresh)
    assert sum(not p.covered for p in fresh) >= 10
    # a fresh tune row without calibration is refused, naming the field
    text = GOOD + f"  batch: {batch}\n"
    with pytest.raises(ValueError, match=rf"set\.yaml:3: \[calibration\] batch {batch}"):
        R.load(_write(tmp_path, text), SKILLS)
    assert R.load(_write(tmp_path, text + "  calibration: true\n"), SKILLS)[0].batch == batch


def test_bench_restricts_figures_to_each_fresh_batch(probs):
    """bench_realprobs reports every batch of R.BATCHES apart: `restrict` keeps exactly the
    batch's rows of one half (optionally only those whose error line no trigger quotes), answers
    aligned, and `fresh_scores` has one table per batch."""
    import bench_realprobs as B

    # answers that name each row's own id as the only hit, so alignment errors show as misses
    answers = [
        {
            "ids": list(p.expected) or [p.id],
            "no_good_match": not p.covered,
            "candidates": None,
            "confidence": [0.9],
        }
        for p in probs
    ]
    got = B.fresh_scores(probs, answers, ("tune", "test"))
    assert set(got) == R.BATCHES
    for batch in R.BATCHES:
        for half in ("tune", "test"):
            sel, ans = B.restrict(probs, answers, batch, half)
            assert sel == [p for p in probs if p.batch == batch and p.half == half]
            assert all(
                a["ids"] == (list(p.expected) or [p.id]) for p, a in zip(sel, ans, strict=True)
            )
            no_lit, _ = B.restrict(probs, answers, batch, half, literal=False)
            assert no_lit == [p for p in sel if not p.literal_in_skill]
            n_cov = sum(p.covered for p in sel)
            assert got[batch][half]["all"]["covered"] == n_cov
            assert got[batch][half]["all"]["hit@1"] == 1.0
            assert got[batch][half]["all"]["no_good_match_uncovered"] == 1.0
            by_conf = got[batch][half]["all"]["top1_right_by_confidence"]
            assert by_conf == {"0.0-0.4": "-", "0.4-0.8": "-", "0.8-1.0": f"1.00 of {n_cov}"}
            assert got[batch][half]["no_literal"]["covered"] <= n_cov


def test_the_recorded_agent_picks_fit_the_set(probs):
    """bench/agent_picks/ (bench/agent_pick.py): every key names a test-half problem, every
    problem has one pick per mode, and an MCP-mode pick is an id its answer showed or "none"."""
    import json

    picks_dir = REPO / "bench" / "agent_picks"
    keys = json.loads((picks_dir / "key.json").read_text())
    test_ids = {p.id for p in probs if p.half == "test"}
    assert set(keys.values()) == test_ids
    modes: dict[str, dict] = {}
    for f in picks_dir.glob("picks-*-*.json"):
        modes.setdefault(f.name.split("-")[1], {}).update(json.loads(f.read_text()))
    assert {"mcp", "catalog"} <= set(modes)
    for mode, picks in modes.items():
        assert set(picks) == set(keys), mode
        shown_file = picks_dir / f"shown-{mode}.json"
        allowed = json.loads(shown_file.read_text()) if shown_file.exists() else None
        for key, v in picks.items():
            assert v["pick"] == "none" or v["pick"] in SKILLS, (mode, key)
            if allowed is not None:
                assert v["pick"] == "none" or v["pick"] in allowed[key], (mode, key)
