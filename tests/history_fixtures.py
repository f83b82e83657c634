"""The shared histories (../shared), replayed and mined once per test session.

Replaying a history and mining it take minutes; the tests that need a mined history (the replay
checks, the dev-set knowledge base) share one copy, read-only: a test that writes copies it
first. The skills-only index (the shipped skills, embedded once) is shared the same way: the
dev-set knowledge base grows from a copy of it, as `kbase index` grows an index after archives
are added, so the skills are embedded once per session, not once per test module.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from common import mine_cmd  # noqa: E402
from devset_kb import shared_dir  # noqa: E402

SHARED = shared_dir()
HIST = SHARED / "data" / "histories"
REPLAY = SHARED / "tools" / "replay_history.py"


@dataclass(frozen=True)
class MinedHistory:
    """One history, replayed (repo) and mined with its recipe (root/pr_archive/name): both are
    shared by every test of the session, so neither may be written to."""

    name: str
    repo: Path
    root: Path
    report: dict  # what `kbase mine --json` printed

    @property
    def archive(self) -> Path:
        return self.root / "pr_archive" / self.name

    def facts(self) -> list[dict]:
        with (HIST / f"{self.name}.jsonl").open(encoding="utf-8") as fh:
            return [json.loads(line) for line in fh]


class Histories:
    def __init__(self, base: Path):
        self.base = base
        self._mined: dict[str, MinedHistory] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def mined(self, name: str) -> MinedHistory:
        with self._guard:
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:
            if name not in self._mined:
                self._mined[name] = self._mine(name)
            return self._mined[name]

    def prefetch(self, names: tuple[str, ...]) -> list[Future[MinedHistory]]:
        """Start mining `names` in the background, two at a time (a mine is one Python process
        fed by git), so the caller can embed meanwhile."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="mine")
        return [self._pool.submit(self.mined, n) for n in names]

    def _mine(self, name: str) -> MinedHistory:
        data = HIST / f"{name}.jsonl"
        if not data.exists():
            pytest.skip(f"shared history {data} not found")
        repo, root = self.base / f"{name}-replay", self.base / f"{name}-kb"
        subprocess.run(
            [sys.executable, str(REPLAY), str(data), str(repo)], check=True, capture_output=True
        )
        (root / "pr_archive").mkdir(parents=True)
        out = subprocess.run(
            mine_cmd(repo, root, name), check=True, capture_output=True, text=True
        ).stdout
        return MinedHistory(name, repo, root, json.loads(out))


@pytest.fixture(scope="session")
def histories(tmp_path_factory):
    if not REPLAY.exists():
        pytest.skip(f"shared histories not found at {SHARED}")
    h = Histories(tmp_path_factory.mktemp("histories"))
    yield h
    if h._pool is not None:
        h._pool.shutdown(wait=True)


@dataclass(frozen=True)
class SkillsIndex:
    """The shipped skills and their index; a template: copy `home` before opening it."""

    root: Path
    home: Path

    def copy_home(self, dest: Path) -> Path:
        shutil.copytree(self.home, dest)
        return dest


@pytest.fixture(scope="session")
def skills_index(real_skills_root, embedder, tmp_path_factory) -> SkillsIndex:
    from kbase.api import KnowledgeBase

    home = tmp_path_factory.mktemp("skills-index") / "home"
    rep = KnowledgeBase(root=real_skills_root, home=home).index()
    assert not rep.problems, [str(p) for p in rep.problems]
    return SkillsIndex(real_skills_root, home)
