"""Issue #28, the ledger and the gate: a signed row stays readable whatever a snippet printed,
readers name bad bytes by path:line, and `check --changed` does not run without a base."""

from __future__ import annotations

import json
from pathlib import Path

from test_trust_ledger import add_skill, git, kbase, signed_root, status_of  # noqa: F401, F811


def test_a_row_holding_line_separators_stays_one_valid_signed_line(signed_root):  # noqa: F811
    root, _, env = signed_root
    name = "separator-skill"
    add_skill(root, name)
    path = root / "skills" / name / "SKILL.md"
    # U+2028, U+2029 and U+0085 are line breaks to str.splitlines(): printed into the row's
    # stderr_tail and message, they split a row written with raw non-ASCII in two
    path.write_text(
        path.read_text().replace('print("ok from', 'print("\\u2028 \\x85 \\u2029 ok from')
    )
    assert kbase("verify", name, "--json", root=root, env=env).returncode == 0
    data = (root / "ledger" / "verifications.jsonl").read_bytes()
    assert data.isascii() and b"\\u2028" in data
    git(root, "init", "-q", "-b", "main")
    git(root, "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "base")
    ok = kbase("ledger", "verify", root=root)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert status_of(root, name)["status"] == "verified"
    git(root, "checkout", "-qb", "change")
    assert kbase("verify", name, root=root, env=env).returncode == 0  # one more such row
    gate = kbase("check", "--changed", "--base", "main", "--json", root=root)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    moved = kbase("ledger", "quarantine", root=root)
    assert moved.returncode == 0, moved.stdout + moved.stderr


def test_bytes_that_are_not_utf8_are_named_not_a_traceback(signed_root, tmp_path):  # noqa: F811
    root, _, _ = signed_root
    ledger = root / "ledger" / "verifications.jsonl"
    good = ledger.read_bytes()
    ledger.write_bytes(good + b'{"skill": "x\xff\xfe"}\n')
    out = kbase("ledger", "verify", "--json", root=root)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    problems = json.loads(out.stdout)["problems"]
    assert any(p["line"] == 2 and "UTF-8" in p["message"] for p in problems), problems
    audit = kbase("audit", "--no-run", "--json", root=root)  # refuses, naming the line
    assert "verifications.jsonl:2: not valid UTF-8" in audit.stderr
    assert "Traceback" not in audit.stderr

    other = tmp_path / "other.jsonl"
    other.write_bytes(b"\x80\x81 not json\n")
    merged = kbase("merge-ledger", str(other), root=root)
    assert merged.returncode != 0 and "Traceback" not in merged.stderr
    assert f"{other}:1" in merged.stdout + merged.stderr


def test_check_changed_refuses_to_run_without_a_base(signed_root, tmp_path):  # noqa: F811
    root, _, _ = signed_root
    # a clone of the change alone: no main, no origin/main. Against HEAD, the branch's own key
    # and the rows it signs would be the base and pass.
    git(root, "init", "-q", "-b", "feature")
    rogue = kbase("keygen", str(tmp_path / "rogue.key"), "--trust", "--json", root=root)
    env = {"KBASE_SIGNING_KEY": json.loads(rogue.stdout)["private"]}
    add_skill(root, "rogue-skill")
    assert kbase("verify", "rogue-skill", root=root, env=env).returncode == 0
    git(root, "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "all of it")
    out = kbase("check", "--changed", root=root)
    assert out.returncode != 0, out.stdout
    assert "no base to compare with" in out.stdout + out.stderr
    assert Path(root / "ledger" / "verifications.jsonl").exists()


def test_the_gate_runs_the_base_branchs_checker_from_the_base_branchs_workflow():
    """A PR that edits validators/changes.py must not judge itself, a ledger-only PR must meet
    the gate (it used to match no `paths:` entry), and a PR that edits the workflow must not
    skip it: for `pull_request` GitHub runs the PR's own copy of the workflow file, for
    `pull_request_target` the base branch's."""
    import yaml

    wf_dir = Path(__file__).resolve().parents[1] / ".github" / "workflows"
    doc = yaml.safe_load((wf_dir / "skills-gate.yml").read_text())
    trigger = doc.get("on", doc.get(True))  # YAML 1.1 reads the key `on` as True
    assert list(trigger) == ["pull_request_target"]
    assert not (trigger["pull_request_target"] or {}).get("paths")
    assert doc["permissions"] == {"contents": "read"}
    (job,) = doc["jobs"].values()
    steps = job["steps"]
    checkouts = [s["with"] for s in steps if s.get("uses", "").startswith("actions/checkout")]
    assert all(c.get("persist-credentials") is False for c in checkouts)
    pr = next(c for c in checkouts if "pull_request.head.sha" in str(c.get("ref")))
    base = next(c for c in checkouts if "ref" not in c)  # the default: the base branch
    runs = [s.get("run", "") for s in steps]
    text = "\n".join(runs)
    assert f"./{base['path']}" in text and f"./{pr['path']}" not in text  # PR code never installed
    assert "${{ secrets." not in (wf_dir / "skills-gate.yml").read_text()
    gate = next(r for r in runs if "check --changed" in r)
    assert "base-kbase/bin/kbase" in gate and "--base" in gate and f"--root {pr['path']}" in gate
    # the PR workflow no longer holds the gate: editing it skips nothing
    pr_wf = (wf_dir / "skills-pr.yml").read_text()
    assert "check --changed" not in pr_wf


def test_rows_of_the_wrong_shape_are_named_not_a_traceback(signed_root):  # noqa: F811
    """A row whose fields have other types (a list for `skill`, a number in the fingerprint)
    crashed every status with a TypeError; now it is `path:line` like any bad row."""
    root, _, _ = signed_root
    ledger = root / "ledger" / "verifications.jsonl"
    good = json.loads(ledger.read_text().splitlines()[0])
    bad_rows = [
        dict(good, skill=["good-skill"]),
        dict(good, duration_s="slow"),
        dict(good, fingerprint={**good["fingerprint"], "triton": 5}),
        dict(good, claims=[{"id": 3, "expect": 5}]),
    ]
    for n, row in enumerate(bad_rows, start=2):
        ledger.write_text(ledger.read_text().splitlines()[0] + "\n" + json.dumps(row) + "\n")
        out = kbase("audit", "--no-run", "--json", root=root)
        assert "Traceback" not in out.stderr, out.stderr
        assert "verifications.jsonl:2:" in out.stderr, (n, out.stderr)
