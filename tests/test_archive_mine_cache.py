"""The definitions cache of a knowledge-base root and the light no-op path of `kbase mine`.

Real repositories whose files go through the hand-written fixtures (tests/fixtures/mining/)
one version after another, so every blob is real C++/CUDA/Python with the shapes that make
the parser and the scanner disagree."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

git = pytest.importorskip("git")

from kbase.ingest.change_symbols import _parse_both, scan_for  # noqa: E402
from kbase.ingest.definitions import grammar_for  # noqa: E402
from kbase.ingest.defs_cache import (  # noqa: E402
    CACHE_FILE,
    SCAN_PENDING,
    DefsCache,
    decode,
    dist_version,
    encode,
)
from kbase.ingest.mining import mine  # noqa: E402

from kbase.schema import Recipe  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "mining"
RECIPE = Recipe(name="cache", upstream="https://github.com/example/cache", families={})


def _versions(suffixes: tuple[str, ...]) -> list[bytes]:
    out = []
    for case in sorted(FIXTURES.iterdir()):
        for side in ("before", "after"):
            for p in sorted(case.glob(f"{side}.*")):
                if p.suffix in suffixes:
                    out.append(p.read_bytes())
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
    # a re-mine replays each commit's facts; without them, each file change's answer; without
    # those, the definitions of each blob: the same cards from every layer
    for tables in (("commits",), ("commits", "changes")):
        db = sqlite3.connect(root / ".kbase" / "cache" / CACHE_FILE)
        for table in tables:  # each run filled them again
            assert db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] > 10
            db.execute(f"DELETE FROM {table}")
        db.commit()
        db.close()
        layer = mine(tmp_path / "repo", root, RECIPE, full=True)
        assert layer.commits_cached == 0
        assert layer.blobs_parsed == 0 and layer.blobs_cached >= first.blobs_parsed
        assert _cards(root) == cards

    monkeypatch.setenv("KBASE_MINE_CACHE", "0")
    off = mine(tmp_path / "repo", tmp_path / "kb-off", RECIPE)
    assert off.blobs_cached == 0 and off.blobs_parsed == first.blobs_parsed
    assert not (tmp_path / "kb-off" / ".kbase").exists()
    assert _cards(tmp_path / "kb-off") == cards


def test_cached_definitions_are_those_of_a_fresh_parse_of_the_blob(tmp_path):
    """The cache is keyed by blob id alone, so what a blob parsed incrementally (from another
    version's tree) yields must equal a parse of the blob from scratch."""
    _history(tmp_path / "repo")
    root = tmp_path / "kb"
    assert mine(tmp_path / "repo", root, RECIPE).blobs_incremental > 0
    db = sqlite3.connect(root / ".kbase" / "cache" / CACHE_FILE)
    rows = db.execute("SELECT blob, lang, data FROM defs").fetchall()
    assert len(rows) > 10
    for blob, lang, data in rows:
        ts, scan = decode(data)
        src = subprocess.run(
            ["git", "-C", str(tmp_path / "repo"), "cat-file", "blob", blob],
            capture_output=True,
            check=True,
        ).stdout
        fresh_ts, fresh_scan, _ = _parse_both(lang, src)
        if scan is SCAN_PENDING:  # the miner scans error regions only when a change needs it
            assert fresh_ts.errors and fresh_scan is not None, blob
            scan = scan_for(lang, src)
        assert (ts.spans, ts.errors, ts.method) == (
            fresh_ts.spans,
            fresh_ts.errors,
            fresh_ts.method,
        ), blob
        assert (scan is None) == (fresh_scan is None), blob
        if scan is not None:
            assert (scan.spans, scan.errors) == (fresh_scan.spans, fresh_scan.errors), blob


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
    assert stale.blobs_cached == 0 and stale.blobs_parsed > 0  # emptied, then refilled
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
    for table in ("defs", "changes", "commits", "cards"):
        db.execute(f"UPDATE {table} SET data = x'7801' || substr(data, 3, 5) || x'00ff00ff'")
    db.commit()
    db.close()
    damaged = mine(tmp_path / "repo", root, RECIPE, full=True)
    assert damaged.commits_cached == 0 and damaged.blobs_parsed > 0
    assert _cards(root) == cards


def test_encoding_round_trips_both_parsers(tmp_path):
    for p in sorted(FIXTURES.glob("*/*")):
        lang = grammar_for(p.name)
        if lang is None:
            continue
        ts, scan, _ = _parse_both(lang, p.read_bytes())
        back_ts, back_scan = decode(encode((ts, scan)))
        assert back_ts.spans == ts.spans and back_ts.errors == ts.errors
        assert back_ts.method == ts.method and back_ts.balanced == ts.balanced
        assert (back_scan is None) == (scan is None)
        if scan is not None:
            assert back_scan.spans == scan.spans and back_scan.balanced == scan.balanced
        assert decode(encode((ts, SCAN_PENDING)))[1] is SCAN_PENDING  # a scan not made yet
    cache = DefsCache(tmp_path / "c.sqlite")
    ts, scan, _ = _parse_both("cuda", _versions((".cuh",))[0])
    cache.put("ab" * 20, "cuda", (ts, scan))
    assert cache.get("ab" * 20, "cuda") is None  # not visible before a flush
    cache.flush()
    assert cache.get("ab" * 20, "cuda")[0].spans == ts.spans
    assert cache.get("ab" * 20, "py") is None
    cache.close()


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
        "kbase.ingest.defs_cache",
        "chromadb",
        "torch",
        "sentence_transformers",
        "triton",
    }
    assert not heavy & loaded, sorted(heavy & loaded)


def test_line_runs_name_what_line_by_line_lookups_name():
    """Owners (runs of lines) against the definition: each changed line asks `in_error`, then
    the scanner's or tree-sitter's `owner`; random nested spans and overlapping errors."""
    import random

    from kbase.ingest.change_symbols import Named, Owners
    from kbase.ingest.definitions import FileDefs, Span

    rng = random.Random(7)

    def nested(n_lines: int, prefix: str) -> list[Span]:
        out: list[Span] = []

        def fill(lo: int, hi: int, depth: int) -> None:
            pos = lo
            while pos < hi and depth < 3:
                a = rng.randint(pos, hi)
                b = rng.randint(a, min(hi, a + rng.randint(0, 40)))
                out.append(Span(a, b, f"{prefix}{len(out) % 9}", "function"))
                fill(a + 1, b - 1, depth + 1)
                pos = b + 1 + rng.randint(0, 5)

        fill(1, n_lines, 0)
        return out

    for _ in range(300):
        n = rng.randint(5, 200)
        ts = FileDefs(spans=nested(n, "t"))
        ts.errors = [(a, a + rng.randint(0, 60)) for a in rng.sample(range(1, n + 20), 3)]
        ts.finish()
        scan = FileDefs(spans=nested(n, "s"), method="scanner").finish()
        with_scan = rng.random() < 0.8
        owners = Owners((ts, scan if with_scan else None))
        got, want = Named(), Named()
        for _ in range(rng.randint(1, 6)):
            start, count = rng.randint(1, n + 10), rng.randint(0, 50)
            owners.name_lines(got, start, count)
            for line in range(start, start + count):
                if with_scan and ts.in_error(line):
                    sp, method = scan.owner(line), "scanner"
                else:
                    sp, method = ts.owner(line), ts.method
                if sp is not None:
                    want.add(sp, method)
        assert (got.symbols, got.named_by, got.kinds, got.lines) == (
            want.symbols,
            want.named_by,
            want.kinds,
            want.lines,
        )


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
    db.execute("UPDATE meta SET v = 'older card code' WHERE k = 'cards'")
    db.commit()
    db.close()
    assert mine(tmp_path / "repo", root, other, full=True).cards_cached == 0
    assert mine(tmp_path / "repo", root, other, full=True).cards_cached > 0


def test_the_versions_in_the_cache_keys_are_those_importlib_metadata_reads():
    """The grammars' versions (the definitions cache's key) are read from the .dist-info folder
    names, pydantic's (the card cache's) from pydantic itself: the same strings as
    importlib.metadata's, so the keys did not change; one not installed is None, and an
    editable install (no folder beside a package) is answered by importlib.metadata."""
    from importlib import metadata

    from pydantic.version import VERSION

    dists = ("tree-sitter", "tree-sitter-cpp", "tree-sitter-cuda", "tree-sitter-python")
    for dist in (*dists, "pydantic", "gpu-kbase"):
        assert dist_version(dist) == metadata.version(dist), dist
    assert dist_version("no-such-distribution-for-kbase") is None
    assert VERSION == metadata.version("pydantic")
