"""Signed ledger rows against forgery: real keys, real sandboxed runs, a real git repository."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import snippet_skill


def kbase(*args: str, root: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kbase.cli", *args, "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        env={**os.environ, **(env or {})},
    )


def add_skill(root: Path, name: str) -> None:
    snippet_skill(root, name, f'print("ok from {name}")')


def ledger_lines(root: Path) -> list[str]:
    path = root / "ledger" / "verifications.jsonl"
    return [ln for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []


def status_of(root: Path, name: str) -> dict:
    out = kbase("audit", "--no-run", "--json", "--fail-on", "never", root=root)
    assert out.returncode == 0, out.stderr
    return next(j for j in json.loads(out.stdout)["skills"] if j["skill"] == name)


@pytest.fixture()
def signed_root(tmp_path):
    """A root whose ledger trusts one runner key, with one skill verified by a signed run."""
    root = tmp_path / "kb"
    (root / "skills").mkdir(parents=True)
    keys = tmp_path / "keys"
    made = kbase("keygen", str(keys / "runner.key"), "--trust", "--json", root=root)
    assert made.returncode == 0, made.stderr
    info = json.loads(made.stdout)
    assert (root / "ledger" / "trusted-keys" / "runner.key.pub").exists()
    add_skill(root, "good-skill")
    env = {"KBASE_SIGNING_KEY": info["private"]}
    ran = kbase("verify", "good-skill", "--json", root=root, env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return root, info, env


def test_keygen_writes_a_private_key_only_its_owner_reads(tmp_path):
    out = kbase("keygen", str(tmp_path / "k" / "a.key"), "--json", root=tmp_path)
    info = json.loads(out.stdout)
    assert os.stat(info["private"]).st_mode & 0o777 == 0o600
    pub = Path(info["public"]).read_text()
    assert pub.startswith("kbase-ed25519 ") and len(info["key_id"]) == 16
    again = kbase("keygen", str(tmp_path / "k" / "a.key"), root=tmp_path)
    assert again.returncode != 0 and "exists already" in again.stderr


def test_signed_run_verifies_and_counts(signed_root):
    root, info, _ = signed_root
    (row,) = [json.loads(ln) for ln in ledger_lines(root)]
    assert row["sig"]["key"] == info["key_id"] and row["isolated"] is True
    assert status_of(root, "good-skill")["status"] == "verified"
    checked = kbase("ledger", "verify", "--json", root=root)
    assert checked.returncode == 0, checked.stdout
    assert json.loads(checked.stdout)["counts"]["trusted"] == 1


def test_unsigned_runs_are_not_recorded_once_keys_are_trusted(signed_root):
    root, _, _ = signed_root
    add_skill(root, "other-skill")
    ran = kbase("verify", "other-skill", root=root)
    assert ran.returncode == 0 and "not recorded" in ran.stderr
    assert len(ledger_lines(root)) == 1


def test_forged_unsigned_row_changes_no_status_and_fails_ledger_verify(signed_root):
    root, _, _ = signed_root
    add_skill(root, "victim-skill")
    before = status_of(root, "victim-skill")["status"]
    good = json.loads(ledger_lines(root)[0])
    forged = {k: v for k, v in good.items() if k != "sig"}
    forged["skill"] = "victim-skill"
    from kbase.ingest.skills import load_skill

    skill = load_skill(root / "skills" / "victim-skill" / "SKILL.md", root)
    forged["snippet_sha256"] = skill.snippet_sha256()
    with open(root / "ledger" / "verifications.jsonl", "a") as fh:
        fh.write(json.dumps(forged, sort_keys=True) + "\n")
    after = status_of(root, "victim-skill")
    # the forged pass never verifies: the entry says it was only self-reported
    assert before == "unverified" and after["status"] == "self-reported"
    assert "do not count" in " ".join(after["reasons"])
    checked = kbase("ledger", "verify", root=root)
    assert checked.returncode == 1 and "self-reported" in checked.stdout


def test_row_with_a_broken_signature_fails_and_does_not_count(signed_root):
    root, _, _ = signed_root
    path = root / "ledger" / "verifications.jsonl"
    row = json.loads(ledger_lines(root)[0])
    row["message"] = row["message"] + " (edited)"  # the signature no longer covers the payload
    path.write_text(json.dumps(row, sort_keys=True) + "\n")
    assert status_of(root, "good-skill")["status"] == "self-reported"
    checked = kbase("ledger", "verify", root=root)
    assert checked.returncode == 1 and "does not verify" in checked.stdout


def test_merge_ledger_keeps_signatures(signed_root, tmp_path):
    root, info, _ = signed_root
    other = tmp_path / "other"
    (other / "ledger" / "trusted-keys").mkdir(parents=True)
    (other / "ledger" / "trusted-keys" / "runner.key.pub").write_text(
        Path(info["public"]).read_text()
    )
    add_skill(other, "good-skill")
    merged = kbase(
        "merge-ledger", str(root / "ledger" / "verifications.jsonl"), "--json", root=other
    )
    assert merged.returncode == 0 and json.loads(merged.stdout)["added"] == 1
    assert ledger_lines(other) == ledger_lines(root)
    assert kbase("ledger", "verify", root=other).returncode == 0
    assert status_of(other, "good-skill")["status"] == "verified"


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture()
def repo(signed_root):
    root, info, env = signed_root
    git(root, "init", "-q", "-b", "main")
    git(root, "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "base")
    git(root, "checkout", "-qb", "change")
    return root, info, env


def check_changed(root: Path) -> subprocess.CompletedProcess:
    return kbase("check", "--changed", "--base", "main", "--json", root=root)


def test_check_changed_accepts_rows_signed_by_a_trusted_key(repo):
    root, _, env = repo
    add_skill(root, "new-skill")
    assert kbase("verify", "new-skill", root=root, env=env).returncode == 0
    out = check_changed(root)
    assert out.returncode == 0, out.stdout + out.stderr


def test_check_changed_fails_on_a_forged_or_tampered_or_deleted_row(repo):
    root, _, _ = repo
    path = root / "ledger" / "verifications.jsonl"
    original = path.read_text()
    row = json.loads(original.splitlines()[0])
    forged = {k: v for k, v in row.items() if k != "sig"} | {"skill": "victim-skill"}
    path.write_text(original + json.dumps(forged, sort_keys=True) + "\n")
    out = check_changed(root)
    assert out.returncode == 1 and "not signed by a key that main trusts" in out.stdout

    tampered = dict(row, message="tampered")
    path.write_text(original + json.dumps(tampered, sort_keys=True) + "\n")
    out = check_changed(root)
    assert out.returncode == 1 and "does not verify" in out.stdout

    path.write_text("")
    out = check_changed(root)
    assert out.returncode == 1 and "edited or deleted" in out.stdout


def test_check_changed_fails_when_a_change_trusts_its_own_key(repo, tmp_path):
    root, _, _ = repo
    rogue = kbase("keygen", str(tmp_path / "rogue.key"), "--trust", "--json", root=root)
    env = {"KBASE_SIGNING_KEY": json.loads(rogue.stdout)["private"]}
    add_skill(root, "rogue-skill")
    assert kbase("verify", "rogue-skill", root=root, env=env).returncode == 0
    out = check_changed(root)
    assert out.returncode == 1
    assert "trusted keys change" in out.stdout and "not signed by a key" in out.stdout
