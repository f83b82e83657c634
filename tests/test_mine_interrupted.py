"""A `kbase mine` killed (SIGKILL) in the middle of its stream: nothing it started lives on, the
archive keeps no temporaries and no state, and the next run reads back what the killed one cached
and ends with the cards of an uninterrupted mine."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from common import mine_cmd
from kbase.ingest.mine_cache import CACHE_FILE
from kbase.ingest.mining import mine
from procs import kill9_when, left_in_session, session_members

from kbase.schema import Recipe


def _cached_commits(cache: Path) -> int:
    """Commits whose facts a running mine has saved to its cache (0 before it has any)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{cache}?mode=ro", uri=True)) as db:
            return db.execute("SELECT count(*) FROM items WHERE k LIKE 'commit:%'").fetchone()[0]
    except sqlite3.Error:
        return 0


def _fast_import_repo(path: Path, commits: int) -> None:
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    lines = []
    for i in range(1, commits + 1):
        msg = f"change number {i} (#{i})\n".encode()
        blob = "".join(f"def f{j}():\n    return {i}\n" for j in range(i % 7 + 1)).encode()
        lines.append(b"commit refs/heads/main\n")
        lines.append(b"committer T <t@example.invalid> %d +0000\n" % (1_700_000_000 + i * 60))
        lines.append(b"data %d\n%s" % (len(msg), msg))
        lines.append(b"M 100644 inline src/m%d.py\ndata %d\n%s\n" % (i % 50, len(blob), blob))
    subprocess.run(
        ["git", "-C", str(path), "fast-import", "--quiet"], input=b"".join(lines), check=True
    )
    subprocess.run(["git", "-C", str(path), "checkout", "-q", "main"], check=True)


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    """A repository of 2,500 one-PR commits (read only by the tests)."""
    repo = tmp_path_factory.mktemp("big") / "big"
    _fast_import_repo(repo, 2500)
    return repo


def _workers_of(proc: subprocess.Popen) -> list[int]:
    """The naming workers of a running mine (once it has started them; 60 s at most)."""
    deadline = time.monotonic() + 60
    workers: list[int] = []
    while not workers and proc.poll() is None and time.monotonic() < deadline:
        workers = [p for p, cmd in session_members(proc.pid) if b"kbase.ingest.name_pool" in cmd]
        time.sleep(0.01)
    if not workers:
        proc.kill()
        pytest.skip("the mine finished before its workers could be found")
    return workers


def test_interrupted_mine_completes_on_rerun_without_duplicates(big, tmp_path):
    repo = big
    root = tmp_path / "kb"
    (root / "pr_archive").mkdir(parents=True)  # a root must exist (kbase init)
    folder = root / "pr_archive" / "big"
    cmd = mine_cmd(repo, root, "big")
    # two naming workers whatever the machine (ingest/name_pool.py)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "KBASE_MINE_FLUSH_EVERY": "50"}
    env["KBASE_MINE_WORKERS"] = "2"
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True
    )
    # killed in the middle of the stream, once it has saved some commits' facts to its cache
    cache = root / ".kbase" / "cache" / CACHE_FILE
    running: list[tuple[int, bytes]] = []

    def ready() -> bool:
        if _cached_commits(cache) == 0:
            return False
        running.extend(session_members(proc.pid))
        return True

    kill9_when(proc, ready, "mine")
    workers = [pid for pid, cmd in running if b"kbase.ingest.name_pool" in cmd]
    assert len(workers) == 2, running
    # nothing it started lives on: every git and naming worker it ran reads EOF and exits
    assert left_in_session(proc.pid) == []
    partial = len(list(folder.glob("*.md")))
    assert partial < 2500  # cards are written after the stream: none, or some of the last writes
    assert not (folder / ".state.json").exists()  # state is written last

    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["mode"] == "full" and out["prs"] == 2500 and out["unchanged"] >= partial - 1
    assert out["commits_cached"] >= 50  # what the killed run streamed is read back, not mined
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(
        [".state.json"] + [f"{i}.md" for i in range(1, 2501)]
    )  # no temporaries, no duplicates

    clean = tmp_path / "clean"
    mine(repo, clean, Recipe(name="big"))
    for i in (1, 777, 2500):
        assert (folder / f"{i}.md").read_text() == (
            clean / "pr_archive" / "big" / f"{i}.md"
        ).read_text()


def test_a_killed_naming_worker_fails_the_mine_clearly(big, tmp_path):
    """A naming worker killed mid-mine (the OOM killer, say): the mine stops with an error that
    says so, exit 2, and leaves no process and no state behind."""
    root = tmp_path / "kb"
    (root / "pr_archive").mkdir(parents=True)
    env = {**os.environ, "KBASE_MINE_WORKERS": "2"}
    proc = subprocess.Popen(
        mine_cmd(big, root, "big"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    workers = _workers_of(proc)
    os.kill(workers[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err  # kbase's exit status for an error it explains
    assert f"naming worker (pid {workers[0]}) ended with signal 9" in err.decode()
    assert b"Traceback" not in err
    assert left_in_session(proc.pid) == []
    assert not (root / "pr_archive" / "big" / ".state.json").exists()


@pytest.mark.parametrize("after", [0.0, 0.5], ids=["while-workers-start", "mid-stream"])
def test_ctrl_c_stops_a_mine_and_its_workers_quietly(big, tmp_path, after):
    """Ctrl-C reaches the terminal's process group: the mine exits 130 and no worker prints a
    traceback of its own or lives on, also when it lands while a worker still starts Python."""
    root = tmp_path / "kb"
    (root / "pr_archive").mkdir(parents=True)
    proc = subprocess.Popen(
        mine_cmd(big, root, "big"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "KBASE_MINE_WORKERS": "2"},
        start_new_session=True,
        # a terminal's Ctrl-C: SIGINT as the shell leaves it (a background job ignores it)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    _workers_of(proc)
    time.sleep(after)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the mine finished before it could be interrupted")
    assert proc.returncode == 130, err
    assert b"Traceback" not in err and b"KeyboardInterrupt" not in err, err
    assert left_in_session(proc.pid) == []


def test_workers_import_the_installed_kbase_whatever_the_current_directory(tmp_path):
    """A mine run from a folder that holds a `kbase` package of its own (a checkout, a project
    of that name): the naming workers still import the kbase the mine runs, not that one."""
    repo = tmp_path / "repo"
    _fast_import_repo(repo, 60)
    here = tmp_path / "cwd"
    (here / "kbase").mkdir(parents=True)
    (here / "kbase" / "__init__.py").write_text("raise SystemExit('the wrong kbase')\n")
    root = tmp_path / "kb"
    (root / "pr_archive").mkdir(parents=True)
    out = subprocess.run(
        # -P: the mining process itself must not be shadowed (the console script is not)
        [sys.executable, "-P", *mine_cmd(repo, root, "repo")[1:]],
        capture_output=True,
        text=True,
        cwd=here,
        env={**os.environ, "KBASE_MINE_WORKERS": "2"},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["prs"] == 60
    assert "wrong kbase" not in out.stderr


def test_a_worker_that_raises_reports_its_traceback(tmp_path):
    """A request a worker cannot name (a hunk that is not four numbers) makes it raise: the
    mining process fails with the worker's own traceback, commits named before it were handed
    on, and the pool ends its processes."""
    from kbase.ingest.gitlog import CommitFacts, FileFacts
    from kbase.ingest.name_pool import NamePool, WorkerFailed

    repo = tmp_path / "repo"
    _fast_import_repo(repo, 3)
    blob = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD:src/m3.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    pool = NamePool(str(repo / ".git"), 2)
    got: list[CommitFacts] = []

    def commit(sha: str, hunks: list) -> CommitFacts:
        f = FileFacts(path="src/m3.py", new_blob=blob, hunks=hunks)
        return CommitFacts(sha=sha, parents=[], date="", subject="", body="", files=[f])

    try:
        pool.name_commit(commit("good", [(0, 0, 1, 2)]), got.append)
        pool.drain()
        assert [c.sha for c in got] == ["good"] and got[0].files[0].symbols == ["f0"]
        pool.name_commit(commit("bad", [(0, 0, "one", 2)]), got.append)
        with pytest.raises(WorkerFailed, match="(?s)a naming worker failed:.*Traceback.*Error"):
            pool.drain()
    finally:
        pool.close()
    assert [c.sha for c in got] == ["good"]
    assert all(p.poll() is not None for p in pool._procs)
