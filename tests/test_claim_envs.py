"""Claims declared for environments (`when`): judged only on runs in them, recorded elsewhere;
and lint catches CPU-tier claims that a host's CPU features decide (issue: the fp8 _scaled_mm
checks passed on AMD hosts and failed on AMX Xeons)."""

from __future__ import annotations

import pytest
from kbase.ingest.skills import lint_paths
from kbase.validators.claims import env_matches
from kbase.validators.fingerprint import cpu_host
from test_claims import run, write

from kbase.closed_sets import CPU_FLAGS


def _flag_pair() -> tuple[str, str]:
    """A CPU_FLAGS member this host has (or lacks), as a when-condition that holds here and its
    negation, so the test means the same on every host."""
    have = cpu_host()[1]
    flag = have[0] if have else next(iter(CPU_FLAGS))
    return (flag, "!" + flag) if have else ("!" + flag, flag)


def test_claim_outside_its_environment_is_recorded_not_judged(tmp_path):
    here, elsewhere = _flag_pair()
    claims = (
        f'  - {{id: here, text: "holds on this host", expect: "== 1", '
        f'when: {{cpu_flags: ["{here}"]}}}}\n'
        f'  - {{id: there, text: "holds on other hosts only", expect: "== 1", '
        f'when: {{cpu_flags: ["{elsewhere}"]}}}}'
    )
    code = 'print("KBASE_MEASURE here 1")\nprint("KBASE_MEASURE there 0")'
    res = run(tmp_path, write(tmp_path, "env-claims", claims, code))
    assert res.verdict == "pass", res.message
    by_id = {c["id"]: c for c in res.claims}
    assert by_id["here"]["holds"] is True
    assert by_id["there"]["holds"] is None and by_id["there"]["value"] == 0
    assert res.fingerprint["cpu_flags"] == cpu_host()[1]


def test_claim_in_its_environment_still_fails(tmp_path):
    here, _ = _flag_pair()
    claims = (
        f'  - {{id: here, text: "holds on this host", expect: "== 1", '
        f'when: {{cpu_flags: ["{here}"]}}}}'
    )
    res = run(tmp_path, write(tmp_path, "env-fail", claims, 'print("KBASE_MEASURE here 0")'))
    assert res.verdict == "fail" and "claim here: measured 0" in res.message


def test_a_claim_for_another_environment_need_not_be_reported(tmp_path):
    _, elsewhere = _flag_pair()
    claims = (
        f'  - {{id: there, text: "other hosts", expect: "== 1", '
        f'when: {{cpu_flags: ["{elsewhere}"]}}}}'
    )
    res = run(tmp_path, write(tmp_path, "env-absent", claims, "assert 1 + 1 == 2"))
    assert res.verdict == "pass", res.message


@pytest.mark.parametrize(
    ("when", "fp", "expected"),
    [
        ({"gpu": ["H100"]}, {"gpu_name": "NVIDIA H100 80GB HBM3"}, True),
        ({"gpu": ["H100"]}, {"gpu_name": "NVIDIA H200"}, False),
        ({"arch": ["sm90a"]}, {"compute_capability": "9.0"}, True),
        ({"arch": ["sm100"]}, {"compute_capability": "9.0"}, False),
        ({"triton": ">=3.6,<3.9"}, {"triton": "3.6.0"}, True),
        ({"triton": ">=3.6,<3.9"}, {"triton": "3.9.0"}, False),
        ({"torch": ">=2.13"}, {"torch": "2.13.0+cpu"}, True),
        ({"numpy": "<2.4"}, {"numpy": "2.4.6"}, False),
        ({"cpu_flags": ["amx_int8"]}, {"cpu_flags": ["avx2"]}, False),
        ({"cpu_flags": ["!amx_int8"]}, {"cpu_flags": ["avx2"]}, True),
        ({"cpu_flags": ["!amx_int8"]}, {}, None),  # a row from before hosts were recorded
        ({"gpu": ["H100"], "triton": ">=3.9"}, {"gpu_name": "H100", "triton": "3.6.0"}, False),
    ],
)
def test_env_matches(when, fp, expected):
    from kbase.schema import Claim

    claim = Claim(id="c", text="t", expect="== 1", when=when)
    assert env_matches(claim, fp) is expected


def test_unknown_cpu_flag_and_bad_range_are_lint_errors(tmp_path):
    bad = write(
        tmp_path,
        "bad-when",
        '  - {id: c, text: "t", expect: "== 1", when: {cpu_flags: ["amx_int9"], triton: "3.x"}}',
        'print("KBASE_MEASURE c 1")',
    )
    problems = " ".join(str(p) for p in lint_paths([bad], tmp_path))
    assert "unknown CPU flag 'amx_int9'" in problems and "is not a version range" in problems


SCALED = """import torch
a = torch.randn(16, 32).to(torch.float8_e4m3fn)
b = torch.randn(16, 32).to(torch.float8_e4m3fn)
one = torch.tensor(1.0)
{guard}out = torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
print("KBASE_MEASURE ran", 1)
"""


@pytest.mark.parametrize(
    ("guard", "when", "flagged"),
    [
        ("", "", True),  # the fault the issue found: the host picks the kernel
        ("torch.backends.mkldnn.enabled = False\n", "", False),  # pinned: same path everywhere
        ("", ', when: {cpu_flags: ["!amx_int8"]}', False),  # declared for the hosts it holds on
        ("if torch.cuda.is_available():\n    ", "", False),  # only a GPU run calls it
        ("if not torch.cuda.is_available():\n    ", "", True),  # only a CPU run calls it
    ],
)
def test_lint_flags_cpu_claims_that_the_host_decides(tmp_path, guard, when, flagged):
    path = write(
        tmp_path,
        "host-op",
        f'  - {{id: ran, text: "runs", expect: "== 1"{when}}}',
        SCALED.format(guard=guard),
    )
    problems = [p for p in lint_paths([path], tmp_path) if p.code == "host-dependent-cpu-claim"]
    assert bool(problems) is flagged, problems
    if flagged:
        assert problems[0].line is not None and "claims.ran" == problems[0].field


def test_audit_names_skills_an_upgrade_between_triton_releases_would_break(tmp_path):
    """Rows of the same snippet under two Triton releases (as the CPU tiers record them under a
    second interpreter): the audit lists the claim and the literal the newer release lost."""
    import json

    from conftest import run_cli
    from kbase.ingest.skills import load_skill
    from kbase.validators.ledger import append_rows

    path = write(
        tmp_path,
        "moved-api",
        '  - {id: ok, text: "the old API runs (1 = ran)", expect: "== 1"}',
        'print("KBASE_MEASURE ok 1")',
    )
    sha = load_skill(path, tmp_path).snippet_sha256()

    def row(triton: str, value: float, verdict: str, literals: list[str]) -> dict:
        return {
            "skill": "moved-api",
            "snippet_sha256": sha,
            "tier": "cpu-interpret",
            "verdict": verdict,
            "duration_s": 0.1,
            "fingerprint": {"python": "3.11.7", "date": "2026-12-06", "triton": triton},
            "at": "2026-12-06T08:00:00+00:00",
            "claims": [{"id": "ok", "value": value, "expect": "== 1", "holds": value == 1}],
            "literals_seen": literals,
            "isolated": True,
            "message": "" if verdict == "pass" else "claim ok: measured 0, expected == 1",
        }

    append_rows(tmp_path, [row("3.6.0", 1, "pass", ["old text"]), row("3.9.0", 0, "fail", [])])
    res = run_cli("audit", "--no-run", "--json", "--root", str(tmp_path), "--fail-on", "never")
    (diff,) = json.loads(res.stdout)["releases"]
    assert (diff["from"], diff["to"], diff["skill"]) == ("triton 3.6", "triton 3.9", "moved-api")
    assert any("claim ok: 1" in w for w in diff["why"])
    assert "literal no longer printed: 'old text'" in diff["why"]


def test_three_dashes_inside_front_matter_are_a_lint_problem(tmp_path):
    """Claude Code's plugin validator cut a skill's front-matter at '// -----//' in a step."""
    path = write(
        tmp_path,
        "dashes",
        '  - {id: c, text: "prints // -----// IR Dump headers", expect: "== 1"}',
        'print("KBASE_MEASURE c 1")',
    )
    problems = [p for p in lint_paths([path], tmp_path) if p.code == "dashes-in-front-matter"]
    assert len(problems) == 1 and problems[0].line is not None
    clean = write(tmp_path, "no-dashes", '  - {id: c, text: "t", expect: "== 1"}', "x = 1")
    assert not [p for p in lint_paths([clean], tmp_path) if p.code == "dashes-in-front-matter"]


@pytest.mark.parametrize("declared", [False, True])
def test_a_literal_declared_for_one_release_is_expected_only_there(tmp_path, declared):
    """An error text that one Triton release changed: declared with `when`, the run under the
    other release neither counts as 'never printed' nor as an upgrade that broke it."""
    import json

    from conftest import run_cli
    from kbase.ingest.skills import load_skill
    from kbase.validators.ledger import append_rows

    lit = '  - literal: "new error text"' + ('\n    when: {triton: ">=3.9"}' if declared else "")
    path = write(
        tmp_path,
        "moved-text",
        '  - {id: ok, text: "the snippet ran (1 = ran)", expect: "== 1"}',
        'print("KBASE_MEASURE ok 1")',
        trigger=lit,
    )
    sha = load_skill(path, tmp_path).snippet_sha256()

    def row(triton: str, literals: list[str]) -> dict:
        return {
            "skill": "moved-text",
            "snippet_sha256": sha,
            "tier": "cpu-interpret",
            "verdict": "pass",
            "duration_s": 0.1,
            "fingerprint": {"python": "3.11.7", "date": "2026-12-06", "triton": triton},
            "at": "2026-12-06T08:00:00+00:00",
            "claims": [{"id": "ok", "value": 1, "expect": "== 1", "holds": True}],
            "literals_seen": literals,
            "isolated": True,
            "message": "",
        }

    append_rows(tmp_path, [row("3.9.0", ["new error text"]), row("3.6.0", [])])
    res = run_cli("audit", "--no-run", "--json", "--root", str(tmp_path), "--fail-on", "never")
    out = json.loads(res.stdout)
    assert bool(out["releases"]) is not declared
    # the 3.9 row alone printed it; without that row the literal is unseen unless declared
    ledger = tmp_path / "ledger" / "verifications.jsonl"
    lines = ledger.read_text().splitlines()
    ledger.write_text("\n".join(x for x in lines if '"3.9.0"' not in x) + "\n")
    res = run_cli("audit", "--no-run", "--json", "--root", str(tmp_path), "--fail-on", "never")
    unseen = [p for p in json.loads(res.stdout)["problems"] if "never appeared" in p["message"]]
    assert bool(unseen) is not declared
