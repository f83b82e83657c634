"""The mining cache of a knowledge-base root and the light no-op path of `kbase mine`.

Real repositories whose files go through the hand-written fixtures (tests/fixtures/mining/)
one version after another, so every blob is real C++/CUDA/Python with the shapes that make
the parser and the scanner disagree."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import mining_fixtures
import pytest

git = pytest.importorskip("git")

import kbase.ingest.logrun as logrun  # noqa: E402
from kbase.ingest.change_symbols import primary_defs  # noqa: E402
from kbase.ingest.mine_cache import CACHE_FILE  # noqa: E402
from kbase.ingest.mining import mine  # noqa: E402

from kbase.schema import Recipe  # noqa: E402

RECIPE = Recipe(name="cache", upstream="https://github.com/example/cache", families={})


def _versions(suffixes: tuple[str, ...]) -> list[bytes]:
    out = []
    for case in mining_fixtures.CASES:
        if mining_fixtures.truth(case)["path"].endswith(suffixes):
            out.extend(v for v in mining_fixtures.sides(case) if v is not None)
    return out


def _history(path: Path) -> git.Repo:
    """Two files, each rewritten through every fixture of its language, one PR per commit."""
    repo = git.Repo.init(path, initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "T").set_value("user", "email", "t@example.invalid")
    cuda = _versions((".cuh", ".h", ".cu"))
    py = _versions((".py",))
    (path / "README.md").write_text("cache\n")
    repo.git.add("README.md")
    repo.git.commit("-q", "-m", "base (#1)")
    for i in range(max(len(cuda), len(py))):
        for rel, versions in (("csrc/kernels.cuh", cuda), ("pkg/ops.py", py)):
            if i < len(versions):
                (path / rel).parent.mkdir(parents=True, exist_ok=True)
                (path / rel).write_bytes(versions[i])
                repo.git.add(rel)
        repo.git.commit("-q", "-m", f"change {i} (#{i + 2})")
    return repo


def _cards(root: Path) -> dict[str, bytes]:
    folder = root / "pr_archive" / "cache"
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.md"))}


def test_a_remine_reads_the_cache_and_writes_the_same_cards(tmp_path, monkeypatch):
    _history(tmp_path / "repo")
    root = tmp_path / "kb"
    first = mine(tmp_path / "repo", root, RECIPE)
    assert first.blobs_parsed > 10 and first.blobs_cached == 0
    assert first.blobs_incremental > 0  # later versions parse from the tree of the earlier one
    assert (root / ".kbase" / "cache" / CACHE_FILE).exists()
    cards = _cards(root)
    again = mine(tmp_path / "repo", root, RECIPE, full=True)
    assert again.blobs_parsed == 0 and again.blobs_cached >= first.blobs_parsed
    assert _cards(root) == cards
    assert again.commits_cached == again.commits  # git was asked for no diff
    # without the commits' facts, the mine parses again: the same cards
    db = sqlite3.connect(root / ".kbase" / "cache" / CACHE_FILE)
    assert db.execute("SELECT count(*) FROM items WHERE k LIKE 'commit:%'").fetchone()[0] > 10
    db.execute("DELETE FROM items WHERE k LIKE 'commit:%'")
    db.commit()
    db.close()
    layer = mine(tmp_path / "repo", root, RECIPE, full=True)
    assert layer.commits_cached == 0 and layer.blobs_parsed == first.blobs_parsed
    assert _cards(root) == cards

    monkeypatch.setenv("KBASE_MINE_CACHE", "0")
    off = mine(tmp_path / "repo", tmp_path / "kb-off", RECIPE)
    assert off.blobs_cached == 0 and off.blobs_parsed == first.blobs_parsed
    assert not (tmp_path / "kb-off" / ".kbase").exists()
    assert _cards(tmp_path / "kb-off") == cards


def test_incremental_parses_give_the_definitions_of_a_fresh_parse(tmp_path, monkeypatch):
    """A blob parsed from the edited tree of another version must yield what a parse of it from
    scratch yields: a card must not depend on which versions were parsed before."""
    checked: list[str] = []

    class Checked(logrun.SymbolNamer):
        def _parse(self, lang, blob, path, base, data):
            got = super()._parse(lang, blob, path, base, data)
            fresh, _ = primary_defs(lang, data)
            assert (got.spans, got.errors, got.method) == (
                fresh.spans,
                fresh.errors,
                fresh.method,
            ), blob
            checked.append(blob)
            return got

    monkeypatch.setattr(logrun, "SymbolNamer", Checked)
    _history(tmp_path / "repo")
    report = mine(tmp_path / "repo", tmp_path / "kb", RECIPE)
    assert report.blobs_incremental > 0 and len(checked) == report.blobs_parsed > 10


def test_a_damaged_or_outdated_cache_is_ignored(tmp_path):
    _history(tmp_path / "repo")
    root = tmp_path / "kb"
    mine(tmp_path / "repo", root, RECIPE)
    cards = _cards(root)
    path = root / ".kbase" / "cache" / CACHE_FILE

    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET v = 'an older extractor' WHERE k = 'version'")
    db.commit()
    db.close()
    stale = mine(tmp_path / "repo", root, RECIPE, full=True)
    assert stale.commits_cached == 0 and stale.blobs_parsed > 0  # emptied, then refilled
    assert _cards(root) == cards

    for p in path.parent.iterdir():
        p.unlink()
    path.write_bytes(b"this is not a database\n" * 100)
    broken = mine(tmp_path / "repo", root, RECIPE, full=True)
    assert broken.blobs_parsed > 0 and not broken.warnings
    assert _cards(root) == cards
    # the file that was not a database was replaced by a working cache
    assert mine(tmp_path / "repo", root, RECIPE, full=True).commits_cached > 0

    # values damaged in place (what a power cut can leave of pages written without fsync)
    # fail their checksum and are mined again, to the same cards
    db = sqlite3.connect(path)
    db.execute("UPDATE items SET data = x'7801' || substr(data, 3, 5) || x'00ff00ff'")
    db.commit()
    db.close()
    damaged = mine(tmp_path / "repo", root, RECIPE, full=True)
    assert damaged.commits_cached == 0 and damaged.blobs_parsed > 0
    assert _cards(root) == cards


def test_a_noop_mine_through_the_cli_loads_no_mining_machinery(tmp_path):
    _history(tmp_path / "repo")
    root = tmp_path / "kb"
    (root / "pr_archive").mkdir(parents=True)
    args = ["mine", "--repo", str(tmp_path / "repo"), "--name", "cache", "--root", str(root)]
    env = {k: v for k, v in os.environ.items() if k != "KBASE_MINE_CACHE"}
    first = subprocess.run([sys.executable, "-m", "kbase.cli", *args, "--json"], env=env)
    assert first.returncode == 0
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "kbase.cli", *args, "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0 and '"mode": "noop"' in r.stdout
    loaded = {
        line.rsplit("|", 1)[1].strip()
        for line in r.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "kbase.mine_cli" in loaded  # the listing is real
    heavy = {
        "git",  # gitpython
        "tree_sitter",
        "kbase.ingest.card_writer",
        "kbase.ingest.logrun",
        "kbase.ingest.mine_cache",
        "chromadb",
        "torch",
        "sentence_transformers",
        "triton",
    }
    assert not heavy & loaded, sorted(heavy & loaded)


def test_a_remine_reads_the_cards_built_before_for_the_same_facts_and_recipe(tmp_path, monkeypatch):
    _history(tmp_path / "repo")
    root = tmp_path / "kb"
    first = mine(tmp_path / "repo", root, RECIPE)
    assert first.cards_cached == 0
    cards = _cards(root)
    again = mine(tmp_path / "repo", root, RECIPE, full=True)
    assert again.cards_cached == again.commits_cached == again.commits
    assert _cards(root) == cards

    # another recipe shapes other cards: none is read from the cache, and they are those of a
    # mine without it
    other = Recipe(
        name="cache", upstream="https://github.com/example/other", families={"k": ["csrc/**"]}
    )
    changed = mine(tmp_path / "repo", root, other, full=True)
    assert changed.cards_cached == 0 and changed.commits_cached == changed.commits
    monkeypatch.setenv("KBASE_MINE_CACHE", "0")
    mine(tmp_path / "repo", tmp_path / "kb-off", other)
    assert _cards(root) == _cards(tmp_path / "kb-off") != cards
    monkeypatch.delenv("KBASE_MINE_CACHE")

    # cards built by other card code are not read
    db = sqlite3.connect(root / ".kbase" / "cache" / CACHE_FILE)
    db.execute("UPDATE meta SET v = 'older card code' WHERE k = 'version'")
    db.commit()
    db.close()
    assert mine(tmp_path / "repo", root, other, full=True).cards_cached == 0
    assert mine(tmp_path / "repo", root, other, full=True).cards_cached > 0
