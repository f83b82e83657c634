"""kbase new / verify / audit / check as an engineer runs them: real git, real files, the real
sandbox (in-process CLI calls; a subprocess where a signal is the point)."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from conftest import CliRun, run_cli

FIX = Path(__file__).parent / "fixtures" / "validators"
sys.path.insert(0, str(FIX))
from attacks import host_procs_with  # noqa: E402


def kbase(*args: str, root: Path, cwd: Path | None = None) -> CliRun:
    return run_cli(*args, "--root", str(root), cwd=cwd or root)


def fixture_skill(root: Path, name: str, snippet: str) -> Path:
    code = (FIX / "snippets" / snippet).read_text().rstrip("\n")
    text = (
        (FIX / "skill_template.md")
        .read_text()
        .format(
            name=name,
            tiers="[cpu-interpret]",
            timeout=30,
            audit_date=dt.date.today().isoformat(),
            lang="python",
            code=code,
        )
    )
    path = root / "skills" / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_new_scaffold_lints_verifies_and_audits_with_its_gpu_tier_pending(tmp_path):
    (tmp_path / "skills").mkdir()
    made = kbase("new", "my-first-skill", "--json", root=tmp_path)
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout) == {"created": "skills/my-first-skill/SKILL.md"}
    # an untouched scaffold is not a skill: lint names each placeholder and the sample snippet
    path = tmp_path / "skills" / "my-first-skill" / "SKILL.md"
    lint = kbase("lint", "--json", root=tmp_path)
    codes = [p["code"] for p in json.loads(lint.stdout)["problems"]]
    assert lint.returncode == 1 and "sample-snippet" in codes, lint.stdout
    todo = [n for n, ln in enumerate(path.read_text().splitlines(), 1) if "TODO" in ln]
    assert (
        sorted(p["line"] for p in json.loads(lint.stdout)["problems"] if p["code"] == "todo-text")
        == todo
    )
    text = path.read_text().replace("TODO ", "Filled in: ")
    path.write_text(text.replace("x * 3.0", "x * 3.0 + 0.0"))  # the snippet edited
    lint = kbase("lint", root=tmp_path)
    assert lint.returncode == 0, lint.stdout + lint.stderr

    ran = kbase("verify", "my-first-skill", "--json", root=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    results = json.loads(ran.stdout)["results"]
    by_tier = {r["tier"]: r for r in results}
    assert by_tier["cpu-interpret"]["verdict"] == "pass"
    assert set(results[0]) == {
        "skill",
        "tier",
        "verdict",
        "duration_s",
        "line",
        "message",
        "claims",
        "literals_seen",
    }
    rows = (tmp_path / "ledger" / "verifications.jsonl").read_text().splitlines()
    assert len(rows) == 1 and json.loads(rows[0])["verdict"] == "pass"

    html, md, junit = tmp_path / "r" / "a.html", tmp_path / "r" / "a.md", tmp_path / "r" / "a.xml"
    audited = kbase(
        "audit",
        "--no-run",
        "--json",
        "--html",
        str(html),
        "--markdown",
        str(md),
        "--junit",
        str(junit),
        root=tmp_path,
    )
    assert audited.returncode == 0, audited.stderr
    (entry,) = json.loads(audited.stdout)["skills"]
    # the scaffold declares cpu-interpret and gpu: a CPU pass alone does not make it verified
    assert entry["skill"] == "my-first-skill" and entry["status"] == "unverified"
    assert any("tier(s) gpu" in r for r in entry["reasons"]), entry["reasons"]
    page = html.read_text()
    assert "<svg" in page and "my-first-skill" in page
    # the report leads with what needs attention, and why (issue #27)
    lead = page[page.index("Needs attention") : page.index("Verdicts by environment")]
    assert "my-first-skill" in lead and "tier(s) gpu" in lead
    assert not re.search(r"(src|href)=|<link|<script|@import|url\(", page), (
        "the report must be self-contained"
    )
    assert "my-first-skill" in md.read_text()
    assert ET.parse(junit).getroot().tag == "testsuites"

    again = kbase("new", "my-first-skill", root=tmp_path)
    assert again.returncode == 2 and "skills/my-first-skill/SKILL.md already exists" in again.stderr
    bad = kbase("new", "Not_Kebab", root=tmp_path)
    assert bad.returncode == 2 and "kebab-case" in bad.stderr


def test_audit_exit_code_follows_fail_on_and_the_junit_names_the_line(tmp_path):
    ok = fixture_skill(tmp_path, "good-one", "skip_itself.py")
    bad = fixture_skill(tmp_path, "bad-one", "assert_fail.py")
    junit = tmp_path / "junit.xml"
    res = kbase("audit", "--json", "--junit", str(junit), root=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    status = {s["skill"]: s["status"] for s in json.loads(res.stdout)["skills"]}
    assert status == {"bad-one": "failing", "good-one": "unverified"}
    failure = ET.parse(junit).getroot().find(".//testcase[@classname='skills.bad-one']/failure")
    line = next(i + 1 for i, ln in enumerate(bad.read_text().splitlines()) if "# ASSERT" in ln)
    assert f"skills/bad-one/SKILL.md:{line}:" in failure.get("message")
    plain = kbase("audit", "--no-run", "--fail-on", "never", root=tmp_path)
    assert plain.returncode == 0
    # problems first, and a last line a maintainer reads in ten seconds (issue #27)
    assert plain.stdout.index("bad-one") < plain.stdout.index("good-one")
    last = plain.stderr.strip().splitlines()[-1]
    assert last == "audit: 2 skill(s): 1 failing, 1 unverified; exit 0", last
    assert (
        kbase("audit", "--no-run", "--fail-on", "unverified", "good-one", root=tmp_path).returncode
        == 1
    )
    assert ok.exists()


def test_bad_input_is_named_and_exits_non_zero(tmp_path):
    fixture_skill(tmp_path, "fine", "skip_itself.py")
    unknown = kbase("verify", "no-such-skill", root=tmp_path)
    assert unknown.returncode == 2 and "no skill 'no-such-skill'" in unknown.stderr
    tier = kbase("verify", "--tier", "warp", root=tmp_path)
    assert tier.returncode == 2 and "--tier must be one of" in tier.stderr
    level = kbase("audit", "--fail-on", "sometimes", root=tmp_path)
    assert level.returncode == 2 and "--fail-on" in level.stderr

    broken = tmp_path / "skills" / "broken" / "SKILL.md"
    broken.parent.mkdir()
    broken.write_text(
        fixture_skill(tmp_path, "fine", "skip_itself.py")
        .read_text()
        .replace("name: fine", "name: broken")
        .replace("timeout_s: 30", "timeout_s: soon")
    )
    line = next(i + 1 for i, ln in enumerate(broken.read_text().splitlines()) if "timeout_s:" in ln)
    res = kbase("verify", "broken", root=tmp_path)
    assert (
        res.returncode == 1
        and f"skills/broken/SKILL.md:{line}: [verification.timeout_s]" in res.stdout
    )

    ledger = tmp_path / "ledger" / "verifications.jsonl"
    ledger.parent.mkdir()
    ledger.write_text('{"skill": "fine"}\n')
    corrupt = kbase("audit", "--no-run", root=tmp_path)
    assert (
        corrupt.returncode == 2
        and "ledger/verifications.jsonl:1: missing field(s)" in corrupt.stderr
    )


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_check_changed_verifies_only_what_the_branch_touched(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    fixture_skill(tmp_path, "settled", "assert_fail.py")  # failing, but not touched by the branch
    git("add", ".")
    git("commit", "-qm", "base")
    git("checkout", "-qb", "feature")
    fixture_skill(tmp_path, "fresh", "skip_itself.py")  # untracked: still counts as changed
    res = kbase("check", "--changed", "--base", "main", "--json", root=tmp_path)
    out = json.loads(res.stdout)
    assert out["skills"] == ["fresh"] and out["base"] == "main"
    # its only tier skipped: nothing ran the snippet, so the check is not green (issue #27)
    assert res.returncode == 1 and [p["code"] for p in out["problems"]] == ["nothing-ran"]
    fixture_skill(tmp_path, "fresh", "triton_interpret.py")
    res = kbase("check", "--changed", "--base", "main", "--json", root=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr

    git("add", ".")
    git("commit", "-qm", "add fresh")
    settled = tmp_path / "skills" / "settled" / "SKILL.md"
    settled.write_text(
        settled.read_text().replace("Some prose", "Edited prose")
    )  # an uncommitted edit
    res = kbase("check", "--changed", "--base", "main", "--json", root=tmp_path)
    assert res.returncode == 1
    assert json.loads(res.stdout)["skills"] == ["fresh", "settled"]
    nothing = kbase("check", "--changed", "--base", "HEAD", root=tmp_path)
    assert nothing.returncode == 1  # settled is still edited and still failing
    missing = kbase("check", "--changed", "--base", "no-such-branch", root=tmp_path)
    assert missing.returncode == 2 and "no-such-branch" in missing.stderr


def test_terminating_kbase_keeps_finished_rows_and_kills_the_running_snippet(tmp_path):
    import signal
    import time

    fixture_skill(tmp_path, "a-quick", "assert_fail.py")
    marker = f"kbase-loop-{time.time_ns()}"
    # a child with a marked command line: the host can see it start and check it is gone
    code = (
        "import subprocess\n"
        f"subprocess.Popen(['/bin/sh', '-c', 'while :; do sleep 0.1; done; : {marker}'])\n"
        + (FIX / "snippets" / "infinite_loop.py").read_text()
    )
    loop = tmp_path / "skills" / "z-loop" / "SKILL.md"
    loop.parent.mkdir(parents=True)
    loop.write_text(
        (FIX / "skill_template.md")
        .read_text()
        .format(
            name="z-loop",
            tiers="[cpu-interpret]",
            timeout=120,
            audit_date=dt.date.today().isoformat(),
            lang="python",
            code=code.rstrip("\n"),
        )
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kbase.cli",
            "verify",
            "a-quick",
            "z-loop",
            "-j",
            "1",
            "--root",
            str(tmp_path),
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not host_procs_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert host_procs_with(marker), proc.communicate(timeout=5)
    time.sleep(0.2)
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert time.monotonic() - start < 10 and proc.returncode != 0
    deadline = time.monotonic() + 3
    while host_procs_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host_procs_with(marker) == []
    rows = [
        json.loads(ln)
        for ln in (tmp_path / "ledger" / "verifications.jsonl").read_text().splitlines()
    ]
    assert [(r["skill"], r["verdict"]) for r in rows] == [("a-quick", "fail")]


def test_nothing_ran_names_the_extra_that_runs_the_snippet():
    from kbase.validators.runner import RunOutcome

    from kbase.api_validate import nothing_ran

    skipped = RunOutcome("s", "cpu-interpret", "skip", 0.0, message="triton is not installed")
    gpu = RunOutcome("s", "gpu", "skip", 0.0, message="no NVIDIA GPU found (nvidia-smi/NVML)")
    (p,) = nothing_ran([skipped, gpu], {"s": "skills/s/SKILL.md"})
    assert p.path == "skills/s/SKILL.md" and p.code == "nothing-ran"
    assert "gpu-kbase[verify]" in p.message and "no NVIDIA GPU" in p.message
    ran = RunOutcome("s", "cpu-interpret", "pass", 1.0)
    assert nothing_ran([ran, gpu], {}) == []
