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
