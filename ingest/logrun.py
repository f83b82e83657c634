"""Run `git log` over the commits a mine needs and survive missing objects: `git log -p` dies at
the first commit whose diff needs a blob the clone lacks; that commit is rebuilt file by file
(docs/pr-archive.md "Mining") and the log resumes after it."""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import fields
from subprocess import PIPE
from typing import Any

from kbase.ingest.change_symbols import SymbolNamer
from kbase.ingest.definitions import grammar_for
from kbase.ingest.gitlog import LOG_FORMAT, CommitFacts, FileFacts, OnCommit, log_command, parse_log
from kbase.ingest.mine_cache import MineCache
from kbase.ingest.mine_state import MineReport

from kbase.errors import KbaseError

# a run of this many commits from git is named in worker processes (name_pool.py): two by
# default (on 2 cores a third gained nothing; more cores were not measured: KBASE_MINE_WORKERS).
# Mines of the lmdeploy replay since HEAD~N on 2 cores, median of 3, one process vs the pool:
# N=10 0.13 vs 0.23 s, 25 0.50 vs 0.45 s, 50 0.74 vs 0.58 s, 100 1.83 vs 1.45 s, 200 2.92 vs 1.50 s
POOL_MIN = 50


class LogError(KbaseError):
    """git itself failed for a reason other than a missing object."""


class BlobReader:
    """Reads blobs by id through one `git cat-file --batch`; a blob the repository lacks (partial
    or damaged clone) reads as None."""

    def __init__(self, git_dir: str, max_bytes: int = 4 << 20):
        self.git_dir = git_dir
        self.max_bytes = max_bytes
        self._proc: subprocess.Popen[bytes] | None = None

    def read(self, sha: str) -> bytes | None:
        if not sha or set(sha) == {"0"}:
            return None
        if self._proc is None:
            cmd = ["git", f"--git-dir={self.git_dir}", "cat-file", "--batch"]
            self._proc = subprocess.Popen(cmd, stdin=PIPE, stdout=PIPE, stderr=subprocess.DEVNULL)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(f"{sha}\n".encode())
        self._proc.stdin.flush()
        out = self._proc.stdout
        header = out.readline().split()
        if len(header) < 3 or header[1] == b"missing":
            return None
        size = int(header[2])
        data = out.read(size)
        out.read(1)  # the newline after the contents
        return data if header[1] == b"blob" and size <= self.max_bytes else None

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.stdin:
                self._proc.stdin.close()
            self._proc.kill()  # a read cut short by an error may have left an answer unread
            self._proc.wait()
            self._proc = None


def stream_history(
    repo, shas: list[str], on_commit: OnCommit, cache: MineCache | None, report: MineReport
) -> None:
    """Hand `on_commit` the facts of every commit in `shas`, in that order: from `cache` when it
    holds them, else from git (one `git log` per run it does not hold). `report` gets the counts
    of blobs parsed (and incrementally), blobs the cached commits spared, commits from `cache`."""
    git_dir = str(repo.git_dir)
    reader = BlobReader(git_dir)
    local, workers = SymbolNamer(reader.read), _workers()
    pool: Any = None  # a NamePool, started for the first run long enough to pay for it
    spared: set[str] = set()  # blobs whose definitions the cached commits spared
    due = iter(shas)

    def hand_on(c: CommitFacts, streamed: bool = True) -> None:
        want = next(due, None)
        if c.sha != want:
            raise LogError(f"git log gave {c.sha} where {want or 'no more commits'} was due")
        if streamed and cache is not None and not any(f.problem for f in c.files):
            cache.put(f"commit:{c.sha}", pack_commit(c))
        on_commit(c)

    def from_git(run: list[str]) -> None:
        """One `git log` over `run`; the commit git dies on is rebuilt file by file."""
        nonlocal pool
        pos, nm = 0, local
        if len(run) >= POOL_MIN and workers >= 2:
            if pool is None:
                from kbase.ingest.name_pool import NamePool

                pool = NamePool(git_dir, workers)
            nm = pool
        while pos < len(run):
            done, err = _run(git_dir, run[pos:], hand_on, nm)
            pos += done
            if err is not None and pos < len(run):
                hand_on(_salvage(git_dir, run[pos], nm, err))
                pos += 1
            elif err is not None or pos < len(run):
                raise LogError(err or f"git log gave {done} of {len(run) - pos + done} commits")

    try:
        run: list[str] = []
        for sha in shas:
            packed = cache.get(f"commit:{sha}") if cache is not None else None
            if packed is None:  # not held (or damaged): git is asked
                run.append(sha)
                continue
            from_git(run)
            run = []
            c = CommitFacts(*packed[:5])  # unpacks pack_commit's tuple
            c.files = [FileFacts(*f) for f in packed[5]]
            report.commits_cached += 1
            for f in c.files:
                if f.hunks and grammar_for(f.path) is not None:
                    spared.update(_parsed_sides(f))
            hand_on(c, streamed=False)
        from_git(run)
    finally:
        reader.close()
        if pool is not None:
            pool.close()
        for nm in filter(None, (local, pool)):
            report.blobs_parsed += nm.parsed
            report.blobs_incremental += nm.incremental
        report.blobs_cached += len(spared)


def _parsed_sides(f: FileFacts) -> list[str]:
    """The blobs of a file change that naming its symbols parses."""
    sides = [f.old_blob] if f.old_blob and any(h[1] for h in f.hunks) else []
    return sides + ([f.new_blob] if f.new_blob and any(h[3] for h in f.hunks) else [])


def _workers() -> int:
    raw = os.environ.get("KBASE_MINE_WORKERS", "")
    if not raw:
        return min(os.cpu_count() or 1, 2)
    if not raw.isdigit():
        raise KbaseError(f"KBASE_MINE_WORKERS={raw!r}: a whole number of processes (1: none)")
    return int(raw)


_FILE_FIELDS = tuple(f.name for f in fields(FileFacts))


def pack_commit(c: CommitFacts) -> tuple:
    files = [tuple(getattr(f, k) for k in _FILE_FIELDS) for f in c.files]
    return (c.sha, c.parents, c.date, c.subject, c.body, files)


def _run(
    git_dir: str, shas: list[str], on_commit: OnCommit, namer: SymbolNamer
) -> tuple[int, str | None]:
    """(commits handed on, git's error or None)."""
    with tempfile.TemporaryFile() as errf:
        cmd = ["git", f"--git-dir={git_dir}", *log_command()]
        proc = subprocess.Popen(cmd, stdin=PIPE, stdout=PIPE, stderr=errf)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            # git reads every revision from stdin before it writes anything: no deadlock
            proc.stdin.write(("\n".join(shas) + "\n").encode())
            proc.stdin.close()
            n = parse_log(proc.stdout, on_commit, namer, last_ok=lambda: proc.wait() == 0)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        status = proc.wait()
        errf.seek(0)
        err = errf.read().decode("utf-8", "replace").strip()
    return n, (None if status == 0 else err or f"git log exited with {status}")


def _salvage(git_dir: str, sha: str, namer: SymbolNamer, why: str) -> CommitFacts:
    """One commit rebuilt from per-file diffs; files whose diff git cannot produce keep their
    path and a problem, without counts."""

    def git(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True)

    head = git("show", "-s", f"--format={LOG_FORMAT}", sha)
    if head.returncode != 0:
        raise LogError(f"{sha}: {why}")
    parents = git("rev-parse", f"{sha}^@").stdout.decode().split()
    # against the first parent, or for a root commit the empty tree
    rng = [parents[0] if parents else "4b825dc642cb6eb9a060e54bf8d69288fbee4904", sha]
    listing = git("diff-tree", "-r", "-M", "--no-commit-id", "--name-only", "-z", *rng)
    if listing.returncode != 0:
        raise LogError(f"{sha}: {why}; {listing.stderr.decode('utf-8', 'replace').strip()}")
    paths = [p.decode("utf-8", "surrogateescape") for p in listing.stdout.split(b"\0") if p]
    chunks: list[bytes] = [head.stdout]
    broken: list[FileFacts] = []
    config = log_command()
    diff = [*config[: config.index("log")], "diff", "-M", "-p", "-U0", "--full-index", *rng]
    for path in paths:
        one = git(*diff, "--", path)
        if one.returncode == 0:
            chunks.append(one.stdout)
        else:
            msg = one.stderr.decode("utf-8", "replace").strip().splitlines()
            problem = f"{path}: git could not read it ({msg[-1] if msg else 'missing object'})"
            broken.append(FileFacts(path=path, added=None, deleted=None, problem=problem))
    got: list[CommitFacts] = []
    parse_log(iter(b"".join(chunks).splitlines(keepends=True)), got.append, namer)
    commit = got[0]
    commit.files.extend(broken)
    commit.files.sort(key=lambda f: f.path)
    return commit
