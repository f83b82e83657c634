"""What a `kbase` start-up imports (issue #12): a command loads its own area and nothing heavy
that it does not use, so the start-up gains cannot regress unnoticed. Each run is a fresh
process; the modules it loaded are read from sys.modules when the command has finished."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import MODULES_DRIVER, modules_loaded, write_topic_skills

from kbase.api import KnowledgeBase

# never needed to start the CLI, to search an existing index or to mine
HEAVY = ("torch", "chromadb", "sentence_transformers", "fastapi", "mcp", "uvicorn", "starlette")
COMMAND_AREAS = ("archive", "core", "serve", "trust", "validate")


def _loaded(*args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, set[str]]:
    out = subprocess.run(
        [sys.executable, "-c", MODULES_DRIVER, *args],
        capture_output=True,
        text=True,
        env=env or dict(os.environ),
        timeout=120,
    )
    return out, modules_loaded(out.stderr)


def _heavy(mods: set[str]) -> list[str]:
    return sorted(m for m in mods if m.split(".")[0] in HEAVY)


def _areas(mods: set[str]) -> set[str]:
    return {a for a in COMMAND_AREAS if f"kbase.commands.{a}" in mods}


def test_importing_the_cli_loads_no_command_module_and_nothing_heavy():
    code = "import json, sys, kbase.cli; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    mods = set(json.loads(out.stdout))
    assert not _heavy(mods)
    assert not _areas(mods) and "kbase.schema" not in mods and "rich" not in mods


def test_a_command_help_loads_nothing_heavy():
    out, mods = _loaded("mine", "--help")
    assert out.returncode == 0 and "Usage" in out.stdout
    assert not _heavy(mods)


def test_a_search_of_an_existing_index_loads_nothing_heavy(embedder, tmp_path):
    root = tmp_path / "kb"
    write_topic_skills(root)
    kb = KnowledgeBase(root=root, home=tmp_path / "home")
    kb._embedder = embedder
    assert not kb.index().problems  # also writes home/onnx, which the query is embedded with
    env = {**os.environ, "KBASE_HOME": str(kb.home), "KBASE_ROOT": str(root)}
    env.pop("KBASE_MODEL", None)
    for _ in range(2):  # the second run starts with the skill statuses cached on disk
        out, mods = _loaded("search", "warp reduction gives wrong sum", "--json", env=env)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["hits"][0]["id"] == "warp-shuffle-sum"
        assert not _heavy(mods)
    # with the statuses cached, no SKILL.md is parsed: no markdown parser either
    assert "markdown_it" not in mods and "kbase.ingest.skills" not in mods
    # nor the rules that judge a skill and its claims: a cached status needs no judging
    assert not {"kbase.validators.rules", "kbase.validators.claims"} & mods
    # nor what a cold search used to import for nothing (issue #11): concurrent.futures (click
    # itself imports logging and difflib, a few ms)
    assert "concurrent" not in mods


def _git_repo(tmp_path):
    """An empty git repository and a runner of git commands in it."""
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    return repo, git


def _one_kernel_repo(tmp_path):
    """A git repository with one commit adding one kernel, and an empty knowledge base root."""
    repo, git = _git_repo(tmp_path)
    git("init", "-q", "-b", "main")
    (repo / "kernel.cu").write_text("__global__ void k() {}\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "add a kernel (#1)")
    root = tmp_path / "kb"
    (root / "pr_archive").mkdir(parents=True)
    return repo, root


def test_a_no_op_mine_loads_no_miner_machinery(tmp_path):
    repo, root = _one_kernel_repo(tmp_path)
    args = ("mine", "--repo", str(repo), "--name", "demo", "--root", str(root), "--json")
    first, _ = _loaded(*args)
    assert first.returncode == 0, first.stderr
    out, mods = _loaded(*args)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["mode"] == "noop"
    assert not _heavy(mods)
    # decided from the state file and HEAD (kbase.mine_cli) before the CLI framework loads
    assert "kbase.mine_cli" in mods and not _areas(mods)
    lazy = ("rich", "numpy", "yaml", "kbase.ingest.card_writer", "kbase.ingest.logrun")
    # kbase.api itself loads (issue 24: the façade is the only door, mine_cli asks
    # KnowledgeBase.mine_noop), but nothing heavy behind it
    lazy += ("typer", "click", "pydantic", "kbase.schema", "kbase.ingest.mining")
    assert not [m for m in lazy if m in mods]


def test_a_mine_with_work_parses_a_large_header_incrementally_without_numpy(tmp_path):
    """A large header changed in one commit is parsed incrementally, and numpy is not loaded."""
    repo, git = _git_repo(tmp_path)
    git("init", "-q", "-b", "main")
    body = "".join(f"__device__ int f{i}(int x) {{ return x + {i}; }}\n" for i in range(3000))
    for n, text in enumerate((body, body.replace("x + 7;", "x - 7;"))):
        (repo / "big.cuh").write_text(text)  # over 64 KB: the numpy threshold for one text
        git("add", ".")
        git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", f"tune f7 (#{n + 1})")
    root = tmp_path / "kb"
    (root / "pr_archive").mkdir(parents=True)
    args = ("mine", "--repo", str(repo), "--name", "demo", "--root", str(root), "--json")
    out, mods = _loaded(*args)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["mode"] == "full" and report["blobs_incremental"] >= 1
    assert "kbase.ingest.mining" in mods
    assert not _heavy(mods) and "numpy" not in mods


def test_an_edited_recipe_is_read_again_and_shapes_the_cards(tmp_path):
    """An incremental mine under the same recipe stays incremental; an edited recipe makes the
    next mine a full one, and its new families shape the cards."""
    repo, git = _git_repo(tmp_path)
    git("init", "-q", "-b", "main")
    root = tmp_path / "kb"
    (root / "pr_archive" / "recipes").mkdir(parents=True)
    recipe = root / "pr_archive" / "recipes" / "demo.yaml"
    recipe.write_text("name: demo\nfamilies:\n  gemm: ['csrc/gemm/**']\n")
    args = ("mine", "--repo", str(repo), "--name", "demo", "--root", str(root), "--json")
    modes = []
    for n, rel in enumerate(("csrc/gemm/a.cu", "csrc/attn/b.cu", "csrc/attn/c.cu")):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(f"__global__ void k{n}() {{}}\n")
        git("add", ".")
        git("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", f"kernel {n} (#{n + 1})")
        if n == 2:  # the recipe changes: parsed again
            recipe.write_text(recipe.read_text() + "  attn: ['csrc/attn/**']\n")
        out, mods = _loaded(*args)
        assert out.returncode == 0, out.stderr
        modes.append(json.loads(out.stdout)["mode"])
    assert modes == ["full", "incremental", "full"]
    card = (root / "pr_archive" / "demo" / "2.md").read_text()
    assert "attn" in card  # mined under the edited recipe
