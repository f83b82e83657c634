"""`kbase mine` runs in kbase.mine_cli without the CLI framework, and a mine with nothing new is
answered there before the miner loads (issue #12: a no-op under 0.5 s). It must say "no-op"
exactly when the full mine would, and print (results and errors) what the typer command
prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MODULES_DRIVER, modules_loaded

from kbase.api import KnowledgeBase

RECIPE = "name: demo\nupstream: https://github.com/o/demo\nfamilies:\n  gemm: ['csrc/gemm*']\n"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def _commit(repo: Path, rel: str, text: str, msg: str) -> None:
    (repo / rel).parent.mkdir(parents=True, exist_ok=True)
    (repo / rel).write_text(text)
    _git(repo, "add", rel)
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", msg)


@pytest.fixture()
def setup(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _commit(repo, "csrc/gemm.cu", "__global__ void gemm() {}\n", "add gemm (#1)")
    _commit(repo, "csrc/norm.cu", "__global__ void norm() {}\n", "add norm (#2)")
    root = tmp_path / "kb"
    (root / "pr_archive" / "recipes").mkdir(parents=True)
    (root / "pr_archive" / "recipes" / "demo.yaml").write_text(RECIPE)
    return repo, root


def _mine(repo: Path, root: Path, *extra: str) -> tuple[dict, set[str]]:
    args = ["mine", "--repo", str(repo), "--name", "demo", "--root", str(root), *extra]
    out = subprocess.run(
        [sys.executable, "-c", MODULES_DRIVER, *args, "--json"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), modules_loaded(out.stderr)


def _quick(mods: set[str]) -> bool:
    """Whether the run was answered without the CLI framework or the miner (the quick no-op)."""
    return "kbase.mine_cli" in mods and not {"typer", "kbase.ingest.mining"} & mods


TYPER_CLI = "import sys; from kbase.cli_app import run; sys.argv[0] = 'kbase'; run()"


def _both(*args: str) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """`kbase ARGS` through kbase.cli (mine_cli) and through the typer command."""
    runs = []
    for lead in (["-m", "kbase.cli"], ["-c", TYPER_CLI]):
        runs.append(subprocess.run([sys.executable, *lead, *args], capture_output=True, text=True))
    return runs[0], runs[1]


def test_kbase_cli_mine_prints_what_the_typer_command_prints(setup, tmp_path):
    repo, root = setup
    args = ["mine", "--repo", str(repo), "--name", "demo", "--root", str(root)]
    first, mods = _mine(repo, root)
    assert first["mode"] == "full" and "kbase.ingest.mining" in mods
    ours, theirs = _both(*args, "--full", "--json")
    assert ours.returncode == theirs.returncode == 0, ours.stderr + theirs.stderr
    a, b = json.loads(ours.stdout), json.loads(theirs.stdout)
    a.pop("seconds"), b.pop("seconds")
    assert a == b and a["mode"] == "full" and a["unchanged"] == 2
    ours, theirs = _both(*args, "--since", "HEAD~1")
    assert ours.returncode == theirs.returncode == 0
    assert ours.stdout.splitlines()[0] == theirs.stdout.splitlines()[0]
    assert "demo: since" in ours.stdout
    # errors: the same message, JSON and exit status
    for bad in (
        ["--repo", str(tmp_path / "nowhere")],
        ["--since", "no-such-rev"],
        ["--full", "--since", "HEAD"],
        ["--recipe", "missing-recipe"],
    ):
        ours, theirs = _both(*args, *bad, "--json")
        assert ours.returncode == theirs.returncode == 2, bad
        assert ours.stdout == theirs.stdout and ours.stderr == theirs.stderr, bad
        assert json.loads(ours.stdout)["problems"]


def test_the_quick_noop_reports_what_the_full_noop_reports(setup):
    repo, root = setup
    first, _ = _mine(repo, root)
    assert first["mode"] == "full"
    state = (root / "pr_archive" / "demo" / ".state.json").read_bytes()
    quick, mods = _mine(repo, root)
    assert _quick(mods) and quick["mode"] == "noop"
    full = KnowledgeBase(root=root).mine(str(repo), "demo").as_dict()  # the full code path
    assert full["mode"] == "noop"
    quick.pop("seconds"), full.pop("seconds")
    assert quick == full
    # neither rewrote the state (not even mined_at)
    assert (root / "pr_archive" / "demo" / ".state.json").read_bytes() == state


def test_the_text_output_is_the_full_commands(setup):
    repo, root = setup
    _mine(repo, root)
    quick, full = _both("mine", "--repo", str(repo), "--root", str(root), "--name", "demo")
    assert quick.returncode == full.returncode == 0
    first = quick.stdout.splitlines()[0]
    assert first == "demo: noop (nothing new since the last mine)"
    assert first == full.stdout.splitlines()[0]
    assert quick.stdout.splitlines()[1].startswith("  commits 0, PRs 0,")


def test_anything_new_goes_to_the_full_mine(setup):
    repo, root = setup
    _mine(repo, root)
    recipe = root / "pr_archive" / "recipes" / "demo.yaml"

    # a recipe whose bytes changed but whose families did not: the full path says no-op and
    # records the new bytes, so the next run is quick again
    recipe.write_text(RECIPE + "# a comment\n")
    rep, mods = _mine(repo, root)
    assert rep["mode"] == "noop" and not _quick(mods)
    rep, mods = _mine(repo, root)
    assert rep["mode"] == "noop" and _quick(mods)

    recipe.write_text(RECIPE.replace("gemm*", "gemm.cu"))
    rep, mods = _mine(repo, root)
    assert rep["mode"] == "full" and "recipe changed" in rep["reason"]

    _commit(repo, "csrc/gemm.cu", "__global__ void gemm2() {}\n", "faster gemm (#3)")
    rep, _ = _mine(repo, root)
    assert rep["mode"] == "incremental" and rep["prs"] == 1

    rep, mods = _mine(repo, root, "--recipe", str(recipe))
    assert rep["mode"] == "noop" and _quick(mods)  # a recipe by path, the same bytes
    rep, mods = _mine(repo, root, "--since", "HEAD")
    assert rep["mode"] == "since" and not _quick(mods)


def test_an_upstream_from_origin_is_checked(tmp_path, setup):
    repo, root = setup
    (root / "pr_archive" / "recipes" / "demo.yaml").unlink()  # no recipe: upstream from origin
    _git(repo, "remote", "add", "origin", "git@github.com:o/demo.git")
    rep, _ = _mine(repo, root)
    assert rep["mode"] == "full"
    rep, mods = _mine(repo, root)
    assert rep["mode"] == "noop" and _quick(mods)
    _git(repo, "remote", "set-url", "origin", "https://github.com/o/fork.git")
    rep, mods = _mine(repo, root)
    assert rep["mode"] == "full" and "recipe changed" in rep["reason"]
    state = json.loads((root / "pr_archive" / "demo" / ".state.json").read_text())
    assert state["upstream"] == "https://github.com/o/fork"


def test_a_state_from_an_older_kbase_is_upgraded_by_the_full_noop(setup):
    repo, root = setup
    _mine(repo, root)
    path = root / "pr_archive" / "demo" / ".state.json"
    state = json.loads(path.read_text())
    del state["recipe_source"]
    path.write_text(json.dumps(state))
    rep, mods = _mine(repo, root)
    assert rep["mode"] == "noop" and not _quick(mods)
    assert "recipe_source" in json.loads(path.read_text())
    rep, mods = _mine(repo, root)
    assert rep["mode"] == "noop" and _quick(mods)


def test_a_killed_runs_leftovers_go_on_a_quick_noop(setup):
    repo, root = setup
    _mine(repo, root)
    folder = root / "pr_archive" / "demo"
    (folder / ".1.md.tmp.999").write_text("half")
    rep, mods = _mine(repo, root)
    assert rep["mode"] == "noop" and _quick(mods)
    assert not (folder / ".1.md.tmp.999").exists()
