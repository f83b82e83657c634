"""The parse worker (ingest/parse_worker.py): a mine that parses in a second process writes
byte for byte the cards of a mine that parses in its own, parses the same blobs (as many
incrementally), and fills the definitions cache with what a later mine can use.

Real repositories whose files go through the hand-written fixtures (tests/fixtures/mining/)
one version after another, as in test_archive_mine_cache.py."""

from __future__ import annotations

import pytest

git = pytest.importorskip("git")

import kbase.ingest.logrun as logrun  # noqa: E402
from kbase.ingest.mining import mine  # noqa: E402
from kbase.ingest.parse_worker import MIN_COMMITS, ParseWorker, worker_wanted  # noqa: E402

from tests.test_archive_mine_cache import RECIPE, _cards, _history  # noqa: E402


@pytest.fixture
def started(monkeypatch) -> list[ParseWorker]:
    """The parse workers the mines start (real ones, only counted)."""
    out: list[ParseWorker] = []

    class Counted(ParseWorker):
        def __init__(self, git_dir: str):
            super().__init__(git_dir)
            out.append(self)

    monkeypatch.setattr(logrun, "ParseWorker", Counted)
    return out


def _mine(repo, root, monkeypatch, worker: str, cache: str = "0", **kw):
    monkeypatch.setenv("KBASE_MINE_WORKER", worker)
    monkeypatch.setenv("KBASE_MINE_CACHE", cache)
    return mine(repo, root, RECIPE, **kw)


def test_a_mine_with_the_worker_writes_the_cards_of_one_without(tmp_path, monkeypatch, started):
    _history(tmp_path / "repo")
    alone = _mine(tmp_path / "repo", tmp_path / "alone", monkeypatch, "0")
    assert not started
    helped = _mine(tmp_path / "repo", tmp_path / "helped", monkeypatch, "1")
    assert len(started) == 1 and not started[0]._proc.is_alive()  # started, then reaped
    assert started[0]._proc.exitcode == 0
    assert alone.blobs_parsed > 10 and alone.blobs_incremental > 0
    assert (helped.blobs_parsed, helped.blobs_incremental) == (
        alone.blobs_parsed,
        alone.blobs_incremental,
    )
    assert _cards(tmp_path / "helped") == _cards(tmp_path / "alone")
    assert helped.warnings == alone.warnings


def test_the_cache_a_worker_filled_serves_a_full_remine(tmp_path, monkeypatch, started):
    _history(tmp_path / "repo")
    alone = _mine(tmp_path / "repo", tmp_path / "alone", monkeypatch, "0")
    root = tmp_path / "kb"
    first = _mine(tmp_path / "repo", root, monkeypatch, "1", cache="1")
    assert len(started) == 1 and first.blobs_parsed == alone.blobs_parsed
    assert _cards(root) == _cards(tmp_path / "alone")
    # every blob's definitions (error regions' scans left pending, as without the worker)
    # come from the cache now: nothing is parsed again, and the cards are the same
    again = _mine(tmp_path / "repo", root, monkeypatch, "0", cache="1", full=True)
    assert again.blobs_parsed == 0 and again.blobs_cached >= first.blobs_parsed
    assert _cards(root) == _cards(tmp_path / "alone")


def test_only_a_long_mine_on_more_than_one_cpu_starts_a_worker(monkeypatch):
    monkeypatch.delenv("KBASE_MINE_WORKER", raising=False)
    many = len(__import__("os").sched_getaffinity(0)) > 1
    assert worker_wanted(MIN_COMMITS) is many
    assert not worker_wanted(MIN_COMMITS - 1)  # an incremental mine: no process to start
    monkeypatch.setenv("KBASE_MINE_WORKER", "1")
    assert worker_wanted(1)
    monkeypatch.setenv("KBASE_MINE_WORKER", "0")
    assert not worker_wanted(10 * MIN_COMMITS)


def test_a_worker_that_fails_says_why_and_is_reaped(tmp_path):
    repo = git.Repo.init(tmp_path / "r", initial_branch="main")
    ids = []
    for i, text in enumerate(("def f():\n    return 1\n", "def f():\n    return 2\n")):
        (tmp_path / f"v{i}.py").write_text(text)
        ids.append(repo.git.hash_object("-w", str(tmp_path / f"v{i}.py")))
    worker = ParseWorker(str(tmp_path / "r" / ".git"))
    try:
        first = worker.submit("py", ids[0], "m.py", None)
        assert worker.answer(first)[0][2] == [(1, 2, "f", "function")]
        # hunks that are not hunks: the edit of the held tree fails inside the worker
        bad = worker.submit("py", ids[1], "m.py", (ids[0], None, True))
        with pytest.raises(RuntimeError, match="(?s)parse worker failed.*TypeError"):
            worker.answer(bad)
    finally:
        worker.close()
    assert not worker._proc.is_alive() and worker._proc.exitcode == 1
