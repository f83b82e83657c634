"""Claims: measured by the snippet in the real sandbox, judged by the runner, re-judged by the
status rules, linted with file:line, and shown with their values by `kbase get`."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

from kbase.ingest.skills import lint_paths, load_skill
from kbase.validators.runner import RunSettings, run_tier

SKILL = """---
name: {name}
description: {description}
trigger:
{trigger}
steps: ["measure the speed-up"]
failure_modes: [{{symptom: "slow", cause: "naive kernel", fix: "pad the tile"}}]
verification: {{tiers: [cpu-interpret], timeout_s: 30, asserts: "the speed-up is measured"}}
audit: {{date: {date}}}
claims:
{claims}
---
# {name}

Prose without measured numbers.

```python verify
{code}
```
"""


def write(root: Path, name: str, claims: str, code: str, **kw) -> Path:
    path = root / "skills" / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        SKILL.format(
            name=name,
            claims=claims,
            code=code,
            date=dt.date.today().isoformat(),
            description=kw.get("description", "A fixture skill with claims."),
            trigger=kw.get("trigger", '  - "fixture"'),
        )
    )
    return path


SPEEDUP = '  - {id: speedup, text: "the padded kernel is >= 1.5x the naive one", expect: ">= 1.5"}'


def run(root: Path, path: Path):
    return run_tier(load_skill(path, root), "cpu-interpret", RunSettings(root=root))


def test_claim_that_holds_passes_and_is_recorded(tmp_path):
    out = run(tmp_path, write(tmp_path, "holds", SPEEDUP, 'print("KBASE_MEASURE speedup 2.0")'))
    assert out.verdict == "pass", out
    assert out.result_dict()["claims"] == [
        {"id": "speedup", "value": 2.0, "expect": ">= 1.5", "holds": True, "raw": None}
    ]


def test_claim_that_fails_fails_the_run_naming_claim_value_and_relation(tmp_path):
    out = run(tmp_path, write(tmp_path, "fails", SPEEDUP, 'print("KBASE_MEASURE speedup 1.2")'))
    assert out.verdict == "fail"
    assert out.message == "claim speedup: measured 1.2, expected >= 1.5"
    assert out.claims[0]["holds"] is False


def test_claim_never_reported_is_an_error(tmp_path):
    out = run(tmp_path, write(tmp_path, "silent", SPEEDUP, 'print("done")'))
    assert out.verdict == "error"
    assert "not reported" in out.message and "speedup" in out.message


def test_nan_never_holds(tmp_path):
    out = run(tmp_path, write(tmp_path, "nan", SPEEDUP, 'print("KBASE_MEASURE speedup nan")'))
    assert out.verdict == "fail" and "measured nan" in out.message
    assert out.claims[0]["value"] is None and out.claims[0]["raw"] == "nan"


def test_claim_measured_by_a_compiled_program_through_printf(tmp_path):
    code = (
        "import subprocess, sys\n"
        "src = ('#include <stdio.h>\\n'\n"
        "       'int main(){printf(\"KBASE_MEASURE speedup %.2f\\\\n\", 1.75);}')\n"
        "open('m.c', 'w').write(src)\n"
        "subprocess.run(['cc', 'm.c', '-o', 'm'], check=True)\n"
        "sys.stdout.flush()\n"
        "subprocess.run(['./m'], check=True)"
    )
    out = run(tmp_path, write(tmp_path, "printf", SPEEDUP, code))
    assert out.verdict == "pass", out.output_tail
    assert out.claims[0]["value"] == 1.75


def test_malformed_relation_and_duplicate_ids_are_lint_errors_with_their_line(tmp_path):
    bad = write(
        tmp_path,
        "bad-rel",
        '  - {id: speedup, text: "fast", expect: ">> 1.5"}',
        'print("KBASE_MEASURE speedup 2")',
    )
    problems = [str(p) for p in lint_paths([bad], tmp_path)]
    line = next(i for i, ln in enumerate(bad.read_text().splitlines(), 1) if ">> 1.5" in ln)
    assert any(f"SKILL.md:{line}:" in p and "is not a relation" in p for p in problems), problems
    dup = write(tmp_path, "dup", SPEEDUP + "\n" + SPEEDUP, 'print("KBASE_MEASURE speedup 2")')
    problems = [str(p) for p in lint_paths([dup], tmp_path)]
    assert any("duplicate claim id(s): speedup" in p for p in problems), problems


def test_unbacked_number_is_flagged_with_its_line_and_backed_ones_are_not(tmp_path):
    path = write(
        tmp_path,
        "numbers",
        SPEEDUP,
        'print("KBASE_MEASURE speedup 2")',
        description="Padding gives a 1.5x speed-up, not 8x; a warp has 32 threads.",
    )
    problems = [str(p) for p in lint_paths([path], tmp_path)]
    unbacked = [p for p in problems if "[unbacked-number]" in p]
    assert len(unbacked) == 1 and "8 in description" in unbacked[0], problems
    assert unbacked[0].startswith(f"skills/numbers/SKILL.md:{3}:")


def test_literal_triggers_seen_and_not_seen(tmp_path):
    trigger = '  - literal: "error: too many resources requested"\n  - literal: "never printed"'
    path = write(
        tmp_path,
        "literal",
        SPEEDUP,
        'print("error: too many resources requested for launch")\nprint("KBASE_MEASURE speedup 2")',
        trigger=trigger,
    )
    out = run(tmp_path, path)
    assert out.verdict == "pass"
    assert out.literals_seen == ["error: too many resources requested"]
    cli = [sys.executable, "-m", "kbase.cli"]
    subprocess.run([*cli, "verify", "literal", "--root", str(tmp_path)], check=True)
    audited = subprocess.run(
        [*cli, "audit", "--no-run", "--json", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    problems = json.loads(audited.stdout)["problems"]
    assert [p["field"] for p in problems] == ["trigger"], problems
    assert "never printed" in problems[0]["message"] and audited.returncode == 1


def test_status_rejudges_stored_values_and_counts_claims_in_audit_and_get(tmp_path):
    cited = (
        '  - {id: warp, text: "a warp is 32 threads", cite: "https://docs.nvidia.com/cuda/", '
        'locator: "SIMT Architecture"}'
    )
    path = write(tmp_path, "rejudge", SPEEDUP + "\n" + cited, 'print("KBASE_MEASURE speedup 2.0")')
    cli = [sys.executable, "-m", "kbase.cli"]
    subprocess.run([*cli, "verify", "rejudge", "--root", str(tmp_path)], check=True)

    def audit() -> dict:
        out = subprocess.run(
            [*cli, "audit", "--no-run", "--json", "--fail-on", "never", "--root", str(tmp_path)],
            capture_output=True,
            text=True,
        )
        return json.loads(out.stdout)["skills"][0]

    first = audit()
    assert first["status"] == "verified"
    assert first["claims"] == {"held": 1, "failed": 0, "unmeasured": 0, "cited": 1}
    got = subprocess.run(
        [*cli, "get", "rejudge", "--json", "--root", str(tmp_path)], capture_output=True, text=True
    )
    (speed, warp) = json.loads(got.stdout)["claims"]
    assert speed["measured"][0]["value"] == 2.0 and speed["measured"][0]["holds"] is True
    assert "2 on cpu-interpret (torch" in speed["rendered"]
    assert warp["cite"] == "https://docs.nvidia.com/cuda/" and warp["measured"] == []

    # the text now promises more than was measured: the stored 2.0 no longer holds
    path.write_text(path.read_text().replace('expect: ">= 1.5"', 'expect: ">= 3"'))
    second = audit()
    assert second["status"] == "failing"
    assert any("claim speedup: measured 2.0" in r for r in second["reasons"])
    assert second["claims"]["failed"] == 1
    # `get` renders claims from a cache (kept beside the statuses): never the stale version
    cache = tmp_path / ".kbase" / "cache" / "claim-views.json"
    assert json.loads(cache.read_text())["skills"]["rejudge"]["views"][0]["expect"] == ">= 1.5"
    got = subprocess.run(
        [*cli, "get", "rejudge", "--json", "--root", str(tmp_path)], capture_output=True, text=True
    )
    speed = json.loads(got.stdout)["claims"][0]
    assert speed["expect"] == ">= 3" and speed["measured"][0]["holds"] is False
    assert "(FAILS)" in speed["rendered"]
    assert json.loads(cache.read_text())["skills"]["rejudge"]["views"][0]["expect"] == ">= 3"


def test_claim_views_of_several_skills_write_the_cache_once(tmp_path):
    """A server's warm-up computes the claim views of every skill, and the disk cache is
    written once with all of them (not rewritten per skill)."""
    from kbase.validators import claim_views as CV

    cited = (
        '  - {id: warp, text: "a warp is 32 threads", cite: "https://docs.nvidia.com/cuda/", '
        'locator: "SIMT Architecture"}'
    )
    write(tmp_path, "one", SPEEDUP, 'print("KBASE_MEASURE speedup 2.0")')
    write(tmp_path, "two", cited, "print(1)")
    cache = tmp_path / ".kbase" / "cache" / "claim-views.json"
    CV._memory.clear()
    got = CV.claim_views_of(tmp_path, ["one", "two"])
    assert [v.id for v in got["one"]] == ["speedup"] and [v.id for v in got["two"]] == ["warp"]
    assert sorted(json.loads(cache.read_text())["skills"]) == ["one", "two"]
    stamp = cache.stat().st_mtime_ns
    CV._memory.clear()  # a new process: both read from the cache, which stays as it was
    again = CV.claim_views_of(tmp_path, ["one", "two"])
    assert again == got and cache.stat().st_mtime_ns == stamp
    assert CV.claim_views_of(tmp_path, ["two"])["two"] == got["two"]
