"""Staleness rules, one test per status, plus the cached skill_statuses over a real ledger file."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

import pytest
from kbase.validators.ledger import LedgerError, append_rows, ledger_path, read_ledger
from kbase.validators.rules import SkillFacts, env_gap, judge
from kbase.validators.status import skill_statuses

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
SHA = "a" * 64
FIX = Path(__file__).parent / "fixtures" / "validators"

CPU_ENV = {"triton": "3.9.0", "torch": "2.13.0+cpu", "python": "3.11.7", "date": "2026-11-29"}
H200_ENV = {
    "triton": "3.6.0",
    "torch": "2.11.0",
    "torch_cuda": "12.8",
    "gpu_name": "NVIDIA H200",
    "compute_capability": "9.0",
    "python": "3.12.3",
    "date": "2026-11-29",
}


def facts(tiers=("cpu-interpret",), audit=dt.date(2026, 10, 1), max_age=180, sha=SHA) -> SkillFacts:
    return SkillFacts(
        name="s", tiers=list(tiers), snippet_sha256=sha, audit_date=audit, max_age_days=max_age
    )


def row(
    verdict="pass", tier="cpu-interpret", at="2026-11-20T10:00:00+00:00", sha=SHA, fp=None, **extra
) -> dict:
    return {
        "skill": "s",
        "snippet_sha256": sha,
        "tier": tier,
        "verdict": verdict,
        "duration_s": 1.0,
        "fingerprint": dict(fp or CPU_ENV),
        "at": at,
        "message": extra.get("message", ""),
        "line": extra.get("line"),
    }


def test_verified_after_a_recent_pass_on_a_declared_tier():
    j = judge(facts(), [row()], now=NOW, env=CPU_ENV)
    assert j.status == "verified"
    assert j.last_pass.startswith("2026-11-20")
    assert j.verified_on == "cpu-interpret · triton 3.9 · torch 2.13"


def test_verified_needs_a_pass_on_every_declared_tier():
    both = facts(tiers=("cpu-interpret", "gpu"))
    j = judge(both, [row()], now=NOW, env=CPU_ENV)
    assert j.status == "unverified" and "tier(s) gpu" in j.reasons[0], j.reasons
    on_both = [row(), row(tier="gpu", fp=H200_ENV, at="2026-11-21T00:00:00+00:00")]
    assert judge(both, on_both, now=NOW, env=CPU_ENV).status == "verified"
    # a skipped gpu run measures nothing
    skipped = [row(), row("skip", tier="gpu", fp=H200_ENV)]
    assert judge(both, skipped, now=NOW, env=CPU_ENV).status == "unverified"


def test_failing_when_the_latest_run_on_some_environment_failed():
    rows = [
        row(fp=H200_ENV, tier="gpu", at="2026-11-21T00:00:00+00:00"),
        row(),
        row("fail", at="2026-11-22T00:00:00+00:00", message="AssertionError: off by one", line=42),
    ]
    j = judge(facts(), rows, now=NOW, env=CPU_ENV)
    assert j.status == "failing"
    assert "line 42" in j.reasons[0] and "off by one" in j.reasons[0]
    # a later pass on the same environment clears it
    j2 = judge(facts(), rows + [row(at="2026-11-23T00:00:00+00:00")], now=NOW, env=CPU_ENV)
    assert j2.status == "verified"


@pytest.mark.parametrize("verdict", ["timeout", "killed", "error"])
def test_crashes_and_timeouts_count_as_failing(verdict):
    assert (
        judge(
            facts(), [row(), row(verdict, at="2026-11-25T00:00:00+00:00")], now=NOW, env=CPU_ENV
        ).status
        == "failing"
    )


def test_unverified_with_no_pass_and_skips_do_not_count():
    assert judge(facts(), [], now=NOW, env=CPU_ENV).status == "unverified"
    assert judge(facts(), [row("skip")], now=NOW, env=CPU_ENV).status == "unverified"


def test_editing_the_snippet_resets_its_verdicts():
    j = judge(
        facts(sha="b" * 64),
        [row(), row("fail", at="2026-11-25T00:00:00+00:00")],
        now=NOW,
        env=CPU_ENV,
    )
    assert j.status == "unverified"
    assert "2 run(s) of an earlier snippet" in j.reasons[0]


def test_a_pass_on_an_undeclared_tier_does_not_verify():
    assert judge(facts(tiers=("gpu",)), [row()], now=NOW, env=CPU_ENV).status == "unverified"


def test_stale_age_from_an_old_pass_or_an_old_human_audit():
    old_pass = judge(facts(), [row(at="2026-03-01T00:00:00+00:00")], now=NOW, env=CPU_ENV)
    assert old_pass.status == "stale-age" and "days ago" in old_pass.reasons[0]
    old_audit = judge(facts(audit=dt.date(2025, 1, 1)), [row()], now=NOW, env=CPU_ENV)
    assert old_audit.status == "stale-age" and "human audit" in old_audit.reasons[0]
    assert (
        judge(
            facts(max_age=400), [row(at="2026-03-01T00:00:00+00:00")], now=NOW, env=CPU_ENV
        ).status
        == "verified"
    )


def test_stale_env_for_older_triton_or_torch_minor():
    j = judge(
        facts(tiers=("cpu-interpret",)),
        [row(fp={**CPU_ENV, "triton": "3.6.0"})],
        now=NOW,
        env=CPU_ENV,
    )
    assert j.status == "stale-env" and "triton 3.6.0 < 3.9.0" in j.reasons[0]
    # a newer release than the one asked about is not stale, and patch releases do not matter
    assert (
        judge(facts(), [row(fp={**CPU_ENV, "triton": "3.9.2"})], now=NOW, env=CPU_ENV).status
        == "verified"
    )


def test_stale_env_for_another_arch_or_older_cuda_major():
    b200 = {**H200_ENV, "gpu_name": "NVIDIA B200", "compute_capability": "10.0"}
    on_h200 = [row(tier="gpu", fp=H200_ENV)]
    gpu_only = facts(tiers=("gpu",))
    assert judge(gpu_only, on_h200, now=NOW, env=H200_ENV).status == "verified"
    j = judge(gpu_only, on_h200, now=NOW, env=b200)
    assert j.status == "stale-env" and "cc 9.0" in j.reasons[0]
    cuda13 = {**H200_ENV, "torch_cuda": "13.0"}
    assert "CUDA 12.8 < 13.0" in env_gap(on_h200[0], cuda13, True)
    # a machine without a GPU does not outdate a GPU pass, however old its torch
    assert judge(facts(tiers=("gpu",)), on_h200, now=NOW, env=CPU_ENV).status == "verified"
    # a CPU-only pass does not speak for a GPU arch when the skill declares the gpu tier
    both = facts(tiers=("cpu-interpret", "gpu"))
    assert judge(both, [row()], now=NOW, env=H200_ENV).status == "unverified"
    gpu_elsewhere = [row(), row(tier="gpu", fp=b200)]
    assert judge(both, gpu_elsewhere, now=NOW, env=H200_ENV).status == "stale-env"
    assert (
        judge(
            facts(tiers=("cpu-interpret",)),
            [row(fp={**CPU_ENV, "triton": "3.6.0", "torch": "2.11.0"})],
            now=NOW,
            env=H200_ENV,
        ).status
        == "verified"
    )


def test_stale_source_when_a_watched_path_changed_after_the_last_pass():
    j = judge(facts(), [row()], now=NOW, env=CPU_ENV, source_touched="2026-11-25")
    assert j.status == "stale-source" and "2026-11-25" in j.reasons[0]
    assert (
        judge(facts(), [row()], now=NOW, env=CPU_ENV, source_touched="2026-11-19").status
        == "verified"
    )


def test_severity_order_failing_beats_stale():
    rows = [
        row(at="2026-01-01T00:00:00+00:00"),
        row("fail", tier="gpu", fp=H200_ENV, at="2026-01-02T00:00:00+00:00"),
    ]
    j = judge(
        facts(audit=dt.date(2025, 1, 1)), rows, now=NOW, env=CPU_ENV, source_touched="2026-06-01"
    )
    assert j.status == "failing"
    kinds = " | ".join(j.reasons)
    assert "watched upstream path" in kinds and "days ago" in kinds and "human audit" in kinds


# --------------------------------------------------------------------------- ledger +
# skill_statuses


def make_root(tmp_path: Path, name="cached-skill", code='print("ok")') -> Path:
    text = (
        (FIX / "skill_template.md")
        .read_text()
        .format(
            name=name,
            tiers="[cpu-interpret]",
            timeout=30,
            audit_date="2026-11-01",
            lang="python",
            code=code,
        )
    )
    p = tmp_path / "skills" / name / "SKILL.md"
    p.parent.mkdir(parents=True)
    p.write_text(text)
    return p


def ledger_row(skill, sha, verdict="pass", at="2026-11-28T00:00:00+00:00") -> dict:
    return {
        "skill": skill,
        "snippet_sha256": sha,
        "tier": "cpu-interpret",
        "verdict": verdict,
        "duration_s": 0.1,
        "stderr_tail": "",
        "fingerprint": dict(CPU_ENV),
        "at": at,
        "line": None,
        "message": "",
    }


def test_skill_statuses_follows_the_ledger_and_the_snippet(tmp_path):
    from kbase.ingest.skills import load_skill

    path = make_root(tmp_path)
    sha = load_skill(path, tmp_path).snippet_sha256()
    assert skill_statuses(tmp_path, now=NOW, env=CPU_ENV)["cached-skill"].status == "unverified"
    append_rows(tmp_path, [ledger_row("cached-skill", sha)])
    got = skill_statuses(tmp_path, now=NOW, env=CPU_ENV)["cached-skill"]
    assert got.status == "verified" and got.verified_on.startswith("cpu-interpret")
    # editing the snippet (not just the prose) resets it
    text = path.read_text().replace('print("ok")', 'print("changed")')
    time.sleep(0.01)
    path.write_text(text)
    assert skill_statuses(tmp_path, now=NOW, env=CPU_ENV)["cached-skill"].status == "unverified"


def test_skill_statuses_is_cached_on_the_ledger_mtime(tmp_path):
    make_root(tmp_path)
    append_rows(tmp_path, [ledger_row("cached-skill", "0" * 64)])
    first = skill_statuses(tmp_path, now=NOW, env=CPU_ENV)
    t0 = time.perf_counter()
    for _ in range(50):
        again = skill_statuses(tmp_path, now=NOW, env=CPU_ENV)
    warm_ms = (time.perf_counter() - t0) / 50 * 1000
    assert again is first
    assert warm_ms < 20, warm_ms
    append_rows(tmp_path, [ledger_row("cached-skill", "1" * 64)])
    os.utime(ledger_path(tmp_path), ns=(time.time_ns() + 10**9,) * 2)
    assert skill_statuses(tmp_path, now=NOW, env=CPU_ENV) is not first


def test_a_new_process_reads_statuses_from_disk_until_something_changes(tmp_path):
    from kbase.ingest.skills import load_skill
    from kbase.validators import status as S

    path = make_root(tmp_path)
    sha = load_skill(path, tmp_path).snippet_sha256()
    append_rows(tmp_path, [ledger_row("cached-skill", sha)])
    assert skill_statuses(tmp_path, now=NOW, env=CPU_ENV)["cached-skill"].status == "verified"
    cache = tmp_path / ".kbase" / "cache" / "skill-statuses.json"
    assert cache.exists()
    # a cold process: nothing in memory, and judging would fail, so a hit must come from disk
    S._results.clear()
    real, S.judgements = S.judgements, None
    try:
        assert skill_statuses(tmp_path, now=NOW, env=CPU_ENV)["cached-skill"].status == "verified"
    finally:
        S.judgements = real
    # an edit to the skill misses the disk copy and is judged again
    S._results.clear()
    time.sleep(0.01)
    path.write_text(path.read_text().replace('print("ok")', 'print("changed")'))
    assert skill_statuses(tmp_path, now=NOW, env=CPU_ENV)["cached-skill"].status == "unverified"
    # a corrupt cache file is ignored
    S._results.clear()
    cache.write_text("{not json")
    assert skill_statuses(tmp_path, now=NOW, env=CPU_ENV)["cached-skill"].status == "unverified"


def test_ledger_rows_are_sorted_key_single_lines_and_bad_lines_name_their_line(tmp_path):
    append_rows(tmp_path, [ledger_row("x", SHA), ledger_row("y", SHA, "fail")])
    lines = ledger_path(tmp_path).read_text().splitlines()
    assert len(lines) == 2
    for ln in lines:
        obj = json.loads(ln)
        assert list(obj) == sorted(obj)
    with open(ledger_path(tmp_path), "a") as fh:
        fh.write('{"skill": "z", "tier": "gpu"\n')
    with pytest.raises(LedgerError, match=r"ledger/verifications.jsonl:3: not valid JSON"):
        read_ledger(tmp_path)
    lenient = read_ledger(tmp_path, strict=False)
    assert len(lenient.rows) == 2 and lenient.problems[0].line == 3
    # a truncated last line does not swallow the next append
    append_rows(tmp_path, [ledger_row("w", SHA)])
    assert json.loads(ledger_path(tmp_path).read_text().splitlines()[-1])["skill"] == "w"


def test_merge_ledger_appends_only_rows_it_lacks(tmp_path):
    from kbase.validators.ledger import merge_ledger

    here, there = tmp_path / "here", tmp_path / "there"
    shared = ledger_row("x", SHA)
    append_rows(here, [shared])
    append_rows(there, [shared, ledger_row("x", SHA, "fail", at="2026-11-29T00:00:00+00:00")])
    assert merge_ledger(here, ledger_path(there)) == (1, 1)
    assert merge_ledger(here, ledger_path(there)) == (0, 2)
    assert [json.loads(ln)["verdict"] for ln in ledger_path(here).read_text().splitlines()] == [
        "pass",
        "fail",
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(shared) + "\n" + '{"skill": "x", "verdict": "maybe"}\n')
    with pytest.raises(LedgerError, match=r"bad.jsonl:2: missing field"):
        merge_ledger(here, bad)


def test_stale_source_from_a_real_pr_card_in_the_archive(tmp_path):
    cards = pytest.importorskip("kbase.ingest.card_history")
    from kbase.ingest.card_format import render_card
    from kbase.ingest.skills import load_skill

    from kbase.schema import FileChange, PRCard

    path = make_root(tmp_path, name="watched-skill")
    path.write_text(
        path.read_text().replace(
            "tags:\n", 'watch:\n  - repo: flashinfer\n    paths: ["csrc/attn/**"]\ntags:\n', 1
        )
    )
    sha = load_skill(path, tmp_path).snippet_sha256()
    append_rows(tmp_path, [ledger_row("watched-skill", sha, at="2026-11-20T00:00:00+00:00")])

    def card(pr: int, date: str, changed: str) -> None:
        c = PRCard(
            repo="flashinfer",
            pr=pr,
            sha=f"{pr:040x}",
            date=date,
            title=f"PR {pr}",
            files=[FileChange(path=changed, added=3, deleted=1)],
        )
        out = tmp_path / "pr_archive" / "flashinfer" / f"{pr}.md"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(render_card(c))

    card(10, "2026-11-25", "python/unrelated.py")  # after the pass, but not a watched path
    card(11, "2026-11-10", "csrc/attn/prefill.cu")  # watched, but before the pass
    assert cards.latest_touch(tmp_path, "flashinfer", ["csrc/attn/**"]) == "2026-11-10"
    assert skill_statuses(tmp_path, now=NOW, env=CPU_ENV)["watched-skill"].status == "verified"
    card(12, "2026-11-26", "csrc/attn/decode.cu")  # watched, after the pass
    got = skill_statuses(tmp_path, now=NOW, env=CPU_ENV)["watched-skill"]
    assert got.status == "stale-source" and "2026-11-26" in got.reasons[0]


def test_skill_statuses_asks_about_no_environment_by_default(tmp_path):
    from kbase.ingest.skills import load_skill

    path = make_root(tmp_path, name="old-env-skill")
    sha = load_skill(path, tmp_path).snippet_sha256()
    row = ledger_row("old-env-skill", sha)
    row["fingerprint"] = {**CPU_ENV, "triton": "3.6.0"}
    append_rows(tmp_path, [row])
    assert skill_statuses(tmp_path, now=NOW)["old-env-skill"].status == "verified"
    assert skill_statuses(tmp_path, now=NOW, env=CPU_ENV)["old-env-skill"].status == "stale-env"


def test_self_reported_when_only_uncounted_runs_passed():
    both = facts(tiers=("cpu-interpret", "gpu"))
    unsigned_gpu = [row(tier="gpu", fp=H200_ENV)]
    # a counted CPU pass plus a GPU pass nobody vouches for: self-reported, never verified
    j = judge(both, [row()], now=NOW, env=None, self_reported=unsigned_gpu)
    assert j.status == "self-reported" and "tier(s) gpu" in j.reasons[0], j.reasons
    # no counted pass at all
    j = judge(facts(), [], now=NOW, env=None, self_reported=[row()])
    assert j.status == "self-reported"
    # an uncounted pass of an older snippet, or an uncounted failure, is nothing to report
    old = [row(sha="0" * 64)]
    assert judge(facts(), [], now=NOW, env=None, self_reported=old).status == "unverified"
    assert judge(facts(), [], now=NOW, self_reported=[row("fail")]).status == "unverified"
    # and a counted failure outranks an uncounted pass
    failing = judge(facts(), [row("fail")], now=NOW, self_reported=[row()])
    assert failing.status == "failing"


def test_a_gpu_the_current_snippet_has_not_run_on_is_named_and_a_failure_on_any_gpu_fails():
    h200 = {**CPU_ENV, "gpu_name": "NVIDIA H200", "compute_capability": "9.0"}
    h100 = {**CPU_ENV, "gpu_name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}
    old_h200 = row(tier="gpu", sha="old", fp=h200, at="2026-12-01T10:00:00+00:00")
    new_h100 = row(tier="gpu", fp=h100, at="2026-12-06T10:00:00+00:00")
    j = judge(facts(tiers=("gpu",)), [old_h200, new_h100], now=NOW)
    assert j.status == "verified"
    assert "not re-checked on NVIDIA H200 since 2026-12-01" in j.reasons
    failed_h200 = row(verdict="fail", tier="gpu", fp=h200, at="2026-12-06T11:00:00+00:00")
    j = judge(facts(tiers=("gpu",)), [old_h200, new_h100, failed_h200], now=NOW)
    assert j.status == "failing" and not any("not re-checked" in r for r in j.reasons)
