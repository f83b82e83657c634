"""Mining replayed real histories (../shared): family PR sets agree with `git log`, symbols survive.

The shared history files are read at run time only; nothing from them is stored here.
Histories are replayed with --limit to keep the test short.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("git")

from kbase.ingest.card_format import split_card  # noqa: E402
from kbase.ingest.definitions import C_FAMILY  # noqa: E402
from kbase.ingest.mining import mine  # noqa: E402
from kbase.ingest.recipes import load_recipe_file  # noqa: E402

from kbase.schema import PRCard  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(
    os.environ.get("KBASE_SHARED")
    or next((str(p) for p in (REPO_ROOT.parent / "shared", Path("/work/shared")) if p.exists()), "")
    or REPO_ROOT.parent / "shared"
)
REPLAY = SHARED / "tools" / "replay_history.py"
LIMITS = {"lmdeploy": 1000, "flashinfer": 1200}
PR_RX = re.compile(r"\(#(\d+)\)\s*$")
MERGE_RX = re.compile(r"^Merge pull request #(\d+)\b")

pytestmark = pytest.mark.skipif(
    not REPLAY.exists(), reason=f"shared histories not found at {SHARED}"
)


@pytest.fixture(scope="module", params=sorted(LIMITS))
def mined(request, tmp_path_factory):
    name = request.param
    data = SHARED / "data" / "histories" / f"{name}.jsonl"
    if not data.exists():
        pytest.skip(f"{data} is absent")
    base = tmp_path_factory.mktemp(name)
    repo = base / "repo"
    subprocess.run(
        [sys.executable, str(REPLAY), str(data), str(repo), "--limit", str(LIMITS[name])],
        check=True,
        capture_output=True,
    )
    recipe = load_recipe_file(REPO_ROOT / "pr_archive" / "recipes" / f"{name}.yaml")
    root = base / "kb"
    report = mine(repo, root, recipe)
    cards = {
        int(p.stem): PRCard.model_validate(split_card(p.read_text()).meta)
        for p in (root / "pr_archive" / name).glob("[0-9]*.md")
    }
    with data.open(encoding="utf-8") as fh:
        facts = [json.loads(line) for _, line in zip(range(LIMITS[name]), fh, strict=False)]
    return name, repo, recipe, report, cards, facts


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def _git_log_prs(repo: Path, globs: list[str]) -> set[int]:
    """PRs whose change touches `globs`, asked of git directly: every non-merge commit anywhere in
    the graph (`--full-history`, so commits behind merges count), plus each PR merge diffed against
    its first parent (path limiting hides a merge whose tree matches its branch's)."""
    spec = ["--", *[f":(glob){g}" for g in globs]]
    out = _git(repo, "log", "--full-history", "--no-merges", "--format=%s", *spec)
    prs = {int(m.group(1)) for line in out.splitlines() if (m := PR_RX.search(line))}
    for line in _git(repo, "log", "--merges", "--format=%H %P%x1f%s").splitlines():
        head, subject = line.split("\x1f", 1)
        sha, first = head.split()[:2]
        m = MERGE_RX.match(subject) or PR_RX.search(subject)
        if m and _git(repo, "diff", "--name-only", first, sha, *spec).strip():
            prs.add(int(m.group(1)))
    return prs


def test_counts_match_the_history(mined):
    name, _, _, report, cards, facts = mined
    with_pr = {f["pr"] for f in facts if f["pr"] is not None}
    assert report.commits == len(facts)
    assert report.without_pr == sum(1 for f in facts if f["pr"] is None)
    assert set(cards) == with_pr and report.prs == len(with_pr)


def test_family_pr_sets_equal_git_log_pathspecs(mined):
    name, repo, recipe, _, cards, _ = mined
    checked = 0
    for family, globs in sorted(recipe.families.items()):
        expected = _git_log_prs(repo, globs)
        found = {pr for pr, c in cards.items() if family in c.families}
        assert found == expected, (
            f"{name}/{family}: only mined {sorted(found - expected)[:5]}, "
            f"only git {sorted(expected - found)[:5]}"
        )
        checked += bool(expected)
    assert checked >= 3, f"{name}: too few families with PRs in the replayed range to compare"


def test_symbols_name_definitions_of_the_replayed_files(mined):
    """Replayed file contents are synthetic (a definition line above each change, braces left
    open), so the hunk-header symbols in the history are no ground truth for the parser; the
    fixtures under tests/fixtures/mining carry that. Here: every C-family and Python file change
    is named by the parser or the scanner, never by hunk headers, and every name it gives is a
    definition present in the file before or after the change."""
    name, repo, _, _, cards, _ = mined
    methods: set[str] = set()
    checked = 0
    for pr in sorted(cards)[:: max(1, len(cards) // 150)]:
        card = cards[pr]
        for f in card.files:
            if not f.symbols or not f.path.endswith((*C_FAMILY, ".py", ".pyi")):
                continue
            methods.update(f.named_by)
            text = _git(repo, "show", f"{card.sha}:{f.path}") if f.added else ""
            try:
                text += _git(repo, "show", f"{card.sha}^1:{f.old_path or f.path}")
            except subprocess.CalledProcessError:
                pass
            for sym in f.symbols:
                last = re.split(r"::|\.", sym)[-1]
                assert re.search(
                    rf"(?:def|class)\s+{re.escape(last)}\b|\b{re.escape(last)}\s*\(", text
                ), f"{name} #{pr} {f.path}: {sym} is not defined in the file"
                checked += 1
    assert checked >= 100, f"{name}: too few symbols checked ({checked})"
    assert methods and methods <= {"tree-sitter", "scanner"}
    # no check for junk names here: the replays define `void void() {`, `def import(...)`;
    # tests/test_archive_symbols.py holds the parser to exact symbol sets on real shapes


def test_naming_workers_write_the_cards_the_mining_process_writes_alone(mined, tmp_path):
    """A long mine names its files in worker processes (ingest/name_pool.py): the cards are the
    ones a mine that parses everything itself writes, byte for byte."""
    name, repo, recipe, _, _, _ = mined
    if name != "lmdeploy":
        pytest.skip("one replay is enough")
    folders, reports = [], []
    for workers in ("1", "2"):
        os.environ["KBASE_MINE_WORKERS"] = workers
        try:
            reports.append(mine(repo, tmp_path / workers, recipe))
        finally:
            del os.environ["KBASE_MINE_WORKERS"]
        folders.append(tmp_path / workers / "pr_archive" / name)
    cards = [{p.name: p.read_bytes() for p in f.glob("*.md")} for f in folders]
    assert len(cards[0]) > 300 and cards[0] == cards[1]
    # both parsed the files, the pool in processes that each hold a cache of parsed blobs
    assert min(r.blobs_parsed for r in reports) > 1000
    assert reports[1].blobs_incremental == reports[0].blobs_incremental
