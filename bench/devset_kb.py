"""The knowledge base the dev sets of issue #11 run against: the shipped skills plus PR archives
mined from replays of the four shared histories (../shared, read at run time, never stored).

    from devset_kb import build_kb
    kb = build_kb(Path("/tmp/kbase-devsets"))   # reuses replays, archives and vectors found there
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import mine_cmd  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
HISTORIES = ("lmdeploy", "flashinfer", "flash-attention", "deepgemm")


def shared_dir() -> Path:
    """KBASE_SHARED, else ../shared beside the checkout or shared/ in it, else /work/shared."""
    env = os.environ.get("KBASE_SHARED")
    if env:
        return Path(env)
    for cand in (REPO.parent / "shared", REPO / "shared"):
        if cand.exists():
            return cand
    return Path("/work/shared")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def mine_archives(
    work: Path, root: Path, limit: int | None = None, names: tuple[str, ...] = HISTORIES
) -> None:
    """Replay each shared history under `work` (once) and mine it into `root`'s pr_archive/."""
    shared = shared_dir()
    (root / "pr_archive").mkdir(parents=True, exist_ok=True)  # a knowledge-base root to mine into
    for name in names:
        data = shared / "data" / "histories" / f"{name}.jsonl"
        if not data.exists():
            raise SystemExit(f"shared history {data} not found (set KBASE_SHARED)")
        replay = work / f"{name}-replay"
        if not replay.exists():
            cmd = [
                sys.executable,
                str(shared / "tools" / "replay_history.py"),
                str(data),
                str(replay),
            ]
            if limit:
                cmd += ["--limit", str(limit)]
            subprocess.run(cmd, check=True, capture_output=True)
        subprocess.run(mine_cmd(replay, root, name), check=True, capture_output=True)


def build_skills_kb(work: Path):
    """KnowledgeBase over the shipped skills alone (work/skills-kb, indexed under
    work/skills-home): the skill questions without mining any archive."""
    from kbase.api import KnowledgeBase

    root = work / "skills-kb"
    shutil.rmtree(root / "skills", ignore_errors=True)
    (root / "pr_archive").mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "skills", root / "skills")
    kb = KnowledgeBase(root=root, home=work / "skills-home")
    kb.index()
    return kb


def build_kb(work: Path, limit: int | None = None, fresh_skills: bool = True, mine: bool = True):
    """KnowledgeBase over work/kb (skills + mined archives), indexed under work/home.
    mine=False reuses the archives already in work/kb as they are."""
    from kbase.api import KnowledgeBase

    work.mkdir(parents=True, exist_ok=True)
    root = work / "kb"
    root.mkdir(exist_ok=True)
    if fresh_skills or not (root / "skills").exists():
        shutil.rmtree(root / "skills", ignore_errors=True)
        shutil.copytree(REPO / "skills", root / "skills")
    if mine or not (root / "pr_archive").is_dir():
        t = time.perf_counter()
        mine_archives(work, root, limit)
        _log(f"replayed and mined in {time.perf_counter() - t:.1f}s")
    kb = KnowledgeBase(root=root, home=work / "home")
    t = time.perf_counter()
    last = [0.0]

    def progress(stage: str, done: int, total: int) -> None:
        if time.perf_counter() - last[0] > 10 or done == total:
            last[0] = time.perf_counter()
            _log(f"  {stage} {done}/{total}")

    rep = kb.index(progress=progress)
    _log(
        f"indexed {rep.entries} entries, embedded {len(rep.embedded_entries)} "
        f"in {time.perf_counter() - t:.1f}s"
    )
    return kb
