"""A root must exist and be a knowledge base; `kbase init` makes one; a typo creates nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kbase.config import RootError, find_root, init_root


def kbase(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ if env is None else env)
    e.pop("KBASE_ROOT", None)
    return subprocess.run(
        [sys.executable, "-m", "kbase.cli", *args],
        cwd=cwd,
        env=e,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_typo_in_root_is_an_error_and_creates_nothing(tmp_path):
    typo = tmp_path / "knowlege-base"
    r = kbase("search", "illegal memory access", "--root", str(typo), cwd=tmp_path)
    assert r.returncode == 2
    assert "does not exist" in r.stderr and str(typo) in r.stderr and "kbase init" in r.stderr
    assert not typo.exists() and list(tmp_path.iterdir()) == []


def test_folder_without_skills_or_archive_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    r = kbase("lint", "--root", str(tmp_path / "empty"), cwd=tmp_path)
    assert r.returncode == 2 and "neither skills/ nor pr_archive/" in r.stderr
    assert list((tmp_path / "empty").iterdir()) == []


def test_no_root_anywhere_up_is_an_error(tmp_path):
    r = kbase("search", "x", cwd=tmp_path)
    assert r.returncode == 2 and "no knowledge base at or above" in r.stderr


def test_init_then_found_from_a_subfolder(tmp_path):
    kb = tmp_path / "kb"
    r = kbase("init", str(kb), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (kb / "skills").is_dir() and (kb / "pr_archive").is_dir()
    assert ".kbase/" in (kb / ".gitignore").read_text().splitlines()
    deep = kb / "skills" / "deeper"
    deep.mkdir()
    r = kbase("lint", "--json", cwd=deep)
    assert r.returncode == 0, r.stderr
    again = kbase("init", str(kb), cwd=tmp_path)
    assert again.returncode == 0 and "already a knowledge base" in again.stdout


def test_resolution_order(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    init_root(a)
    init_root(b)
    monkeypatch.chdir(a)
    monkeypatch.setenv("KBASE_ROOT", str(b))
    assert find_root(None) == b.resolve()
    assert find_root(a) == a.resolve()
    monkeypatch.delenv("KBASE_ROOT")
    assert find_root(None) == a.resolve()
    monkeypatch.setenv("KBASE_ROOT", str(tmp_path / "nope"))
    with pytest.raises(RootError, match="KBASE_ROOT"):
        find_root(None)


def test_init_refuses_a_file(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(RootError):
        init_root(f)
