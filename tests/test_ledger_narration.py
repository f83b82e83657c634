"""The `ledger-narration` lint: prose that narrates runs or ledger state ("in the H200 run", "no
GPU value yet") is flagged at its file line, while statements of what holds where pass; checked
through lint_paths and the real `kbase lint --json` CLI on fixture skills, and against every skill
in the repository (issue: 14 such places in 7 of 10 reviewed skills, one inside a symptom)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kbase.ingest.skills import find_skill_files, lint_paths
from kbase.validators.numbers import narration_in

ROOT = Path(__file__).resolve().parents[1]

SKILL = """---
name: {name}
description: >
  {description}
trigger:
  - "{trigger}"
steps: ["{step}"]
failure_modes: [{{symptom: "{symptom}", cause: "naive kernel", fix: "pad the tile"}}]
verification: {{tiers: [cpu-interpret], timeout_s: 30, asserts: "the speed-up is measured"}}
audit: {{date: 2026-12-01}}
claims:
  - {{id: speedup, text: "{claim}", expect: ">= 1.5"}}
---
# {name}

{body}

```python verify
print("KBASE_MEASURE speedup 2.0")
```
"""

NARRATING = dict(
    description="Pad the shared-memory tile; the padded kernel was faster in the H200 run.",
    trigger="transpose slow (seen in two signed runs)",
    step="Pad the tile by one column.",
    symptom="slow transpose (no GPU value yet)",
    claim="the padded kernel is >= 1.5x the naive one (2.0x on the H200)",
    body="Bank conflicts serialise the accesses. The GPU tier measures the gain, but the ledger\n"
    "has no passing run of it so far.",
)
CLEAN = dict(
    description="Pad the shared-memory tile; the padded kernel is faster on any GPU.",
    trigger="transpose slow, results differ from run to run",
    step="Pad the tile by one column; only a GPU run can show the gain.",
    symptom="slow transpose on an H200 with torch 2.11",
    claim="the padded kernel is >= 1.5x the naive one (an H200 has 132 SMs)",
    body="Bank conflicts serialise the accesses: the GPU runs the work later,\n"
    "bf16 on the H200 rounds the same way, and torch 2.11 on the H200 gives NaN.",
)


def _write(root: Path, name: str, parts: dict) -> Path:
    path = root / "skills" / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SKILL.format(name=name, **parts))
    return path


def _narration(path: Path, root: Path) -> list:
    return [p for p in lint_paths([path], root) if p.code == "ledger-narration"]


def test_narrating_prose_is_flagged_at_each_place_with_its_line(tmp_path):
    path = _write(tmp_path, "narrating", NARRATING)
    found = {p.field: p for p in _narration(path, tmp_path)}
    assert set(found) == {
        "description",
        "trigger.0",
        "failure_modes.0.symptom",
        "claims.speedup.text",
        "body",
    }
    lines = path.read_text().split("\n")
    # the body phrase wraps over two lines; it is reported at its paragraph's first line
    assert lines[found["body"].line - 1].startswith("Bank conflicts")
    assert "H200 run" in found["description"].message
    assert "'no GPU value'" in found["failure_modes.0.symptom"].message
    assert "signed runs" in found["trigger.0"].message
    assert "2.0x on the H200" in found["claims.speedup.text"].message
    assert "so far" in found["body"].message


def test_the_review_phrases_are_each_caught():
    phrases = [
        "it failed the kernel in the H200 run",
        "the ledger holds no GPU value yet",
        "2400 and 2616 in the two signed H200 runs",
        "measured on the H200: 2.1x",
        "at least half of peak (0.87 in one run)",
        "The first version of this snippet did exactly that",
        "that run is not in the ledger",
    ]
    assert [p for p in phrases if not narration_in(p)] == []


def test_statements_of_what_holds_where_pass(tmp_path):
    assert _narration(_write(tmp_path, "clean", CLEAN), tmp_path) == []


def test_cli_reports_it_as_json_and_fails(tmp_path):
    _write(tmp_path, "narrating", NARRATING)
    out = subprocess.run(
        [sys.executable, "-m", "kbase.cli", "lint", "--json", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0
    problems = json.loads(out.stdout)["problems"]
    codes = [p["code"] for p in problems if p["code"] == "ledger-narration"]
    assert len(codes) == 5, problems


def test_no_skill_in_the_repository_narrates_runs():
    files = find_skill_files(ROOT)
    assert len(files) > 100
    bad = [str(p) for p in lint_paths(files, ROOT) if p.code == "ledger-narration"]
    assert bad == []
