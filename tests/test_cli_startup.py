"""What a `kbase` start-up imports (issue #12): a command loads its own area and nothing heavy
that it does not use, so the start-up gains cannot regress unnoticed. Each run is a fresh
process; the modules it loaded are read from sys.modules when the command has finished."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import typer
from conftest import MODULES_DRIVER, modules_loaded, write_topic_skills

from kbase.api import KnowledgeBase
from kbase.cli import COMMAND_MODULES

# never needed to start the CLI, to search an existing index or to mine
HEAVY = ("torch", "chromadb", "sentence_transformers", "fastapi", "mcp", "uvicorn", "starlette")
COMMAND_AREAS = sorted({m for m in COMMAND_MODULES.values() if m})


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


def test_the_command_table_is_what_each_module_registers():
    """kbase/cli_app.py names every command's module without importing it; a command added to a
    module and not to the table (or the reverse) fails here, in `kbase --help` order."""
    from kbase.cli import app

    want: dict[str, str | None] = {}
    for area in COMMAND_AREAS:
        sub = typer.Typer()
        __import__(f"kbase.commands.{area}", fromlist=["register"]).register(sub)
        for name in typer.main.get_group(sub).commands:
            want[name] = area
    want["init"] = None
    assert COMMAND_MODULES == want
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    assert group.list_commands(None) == list(COMMAND_MODULES)  # type: ignore[arg-type]


def test_importing_the_cli_loads_no_command_module_and_nothing_heavy():
    code = "import json, sys, kbase.cli; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    mods = set(json.loads(out.stdout))
    assert not _heavy(mods)
    assert not _areas(mods) and "kbase.schema" not in mods and "rich" not in mods


@pytest.mark.parametrize("command, area", [("mine", "archive"), ("search", "core")])
def test_a_command_help_loads_its_own_module_only(command, area):
    out, mods = _loaded(command, "--help")
    assert out.returncode == 0 and "Usage" in out.stdout
    assert not _heavy(mods)
    assert _areas(mods) == {area}


def test_a_search_of_an_existing_index_loads_nothing_heavy(embedder, tmp_path):
    root = tmp_path / "kb"
    write_topic_skills(root)
    kb = KnowledgeBase(root=root, home=tmp_path / "home")
    kb._embedder = embedder
    assert not kb.index().problems  # also exports home/onnx, which the query is embedded with
    env = {**os.environ, "KBASE_HOME": str(kb.home), "KBASE_ROOT": str(root)}
    env.pop("KBASE_ONNX", None)
    for _ in range(2):  # the second run starts with the skill statuses cached on disk
        out, mods = _loaded("search", "warp reduction gives wrong sum", "--json", env=env)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["hits"][0]["id"] == "warp-shuffle-sum"
        assert not _heavy(mods)
        # answered by kbase/commands/search_fast.py: no typer app, no command module
        assert _areas(mods) == set() and not {"typer", "click", "rich"} & _tops(mods)
    # with the statuses cached, no SKILL.md is parsed: no markdown parser either, and no YAML
    # parser (the data files' JSON twins are read instead)
    assert "markdown_it" not in mods and "kbase.ingest.skills" not in mods
    assert "yaml" not in mods
    # nor the rules that judge a skill and its claims: a cached status needs no judging
    assert not {"kbase.validators.rules", "kbase.validators.claims"} & mods
    # nor what a cold search used to import for nothing (issue #11): logging (through
    # concurrent.futures) and difflib (no filter to suggest names for)
    assert not {"logging", "concurrent", "difflib"} & mods


def _tops(mods: set[str]) -> set[str]:
    return {m.split(".")[0] for m in mods}


TYPER_ONLY = "import sys\nfrom kbase.cli_app import run\nsys.argv = ['kbase', *sys.argv[1:]]\nrun()"


def test_the_fast_search_path_answers_exactly_as_the_typer_command(embedder, tmp_path):
    """`kbase search ... --json` skips typer (kbase/commands/search_fast.py); the documented
    typer command, run on the same arguments, prints the same bytes and exits the same way,
    answers and errors alike (an error, or anything unusual, is left to typer)."""
    root = tmp_path / "kb"
    write_topic_skills(root)
    kb = KnowledgeBase(root=root, home=tmp_path / "home")
    kb._embedder = embedder
    assert not kb.index().problems
    env = {**os.environ, "KBASE_HOME": str(kb.home), "KBASE_ROOT": str(root)}
    env.pop("KBASE_ONNX", None)
    answered = [
        ["search", "warp reduction gives wrong sum", "--json"],
        ["search", "--json", "bank conflicts", "-k", "2", "--kind", "skill"],
        ["search", "tf32 mantissa", "--mode", "bm25", "--json", "-k3"],
        ["search", "int64 offsets", "--status", "unverified", "--status", "failing", "--json"],
        # no PR cards: the date filter leaves nothing, and no vector is asked for (the query
        # embedder, loading aside, must not be running when the process exits)
        ["search", "fp8 gemm", "--since=2024-01-01", "--mode", "dense", "--json"],
        ["search", "共享内存 bank 冲突", "--json", "--root", str(root), "--env", "local"],
    ]
    left_to_typer = [
        ["search", "x", "-k", "99", "--json"],
        ["search", "x", "--kind", "nope", "--json"],
        ["search", "x", "--json", "--bogus"],
        ["search", "--json"],
        ["search", "x", "y", "--json"],
        ["search", "x", "--repo", "--json"],
        ["search", "x", "--since", "last tuesday", "--json"],
        ["search", "x", "--json", "--help"],
    ]
    for args in answered + left_to_typer:
        fast, mods = _loaded(*args, env=env)
        typed = subprocess.run(
            [sys.executable, "-c", TYPER_ONLY, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        fast_err = fast.stderr[: fast.stderr.rindex("\nLOADED ")]
        assert (fast.returncode, fast.stdout, fast_err) == (
            typed.returncode,
            typed.stdout,
            typed.stderr,
        ), args
        assert ("typer" not in mods) == (args in answered), args
        if args in answered:
            hits = json.loads(fast.stdout)["hits"]
            assert fast.returncode == 0 and bool(hits) == ("--since=2024-01-01" not in args)
            # a process of its own leaves with os._exit once the answer is flushed (kbase.cli)
            own = subprocess.run(
                [sys.executable, "-m", "kbase.cli", *args],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
            )
            assert (own.returncode, own.stdout, own.stderr) == (0, typed.stdout, typed.stderr)


def test_the_fast_path_turns_the_garbage_collector_back_on(tmp_path, monkeypatch):
    """fast_search runs with the cyclic collector off (a one-shot search) and turns it back on
    when it leaves it to typer, which may then build an index: here nothing is indexed yet."""
    import gc

    from kbase.commands.search_fast import fast_search

    root = tmp_path / "kb"
    write_topic_skills(root)
    monkeypatch.setenv("KBASE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PYDANTIC_DISABLE_PLUGINS", "__all__")  # what fast_search sets, undone
    assert gc.isenabled()
    assert fast_search(["search", "warp reduction", "--json", "--root", str(root)]) is None
    assert gc.isenabled()
    assert not (tmp_path / "home" / "CURRENT").exists()


ONE_BLAS_THREAD = """
import json, os
from kbase.commands.search_fast import _one_blas_thread
_one_blas_thread()
import numpy  # loaded already, unless the user chose a thread count
from threadpoolctl import threadpool_info
blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
print(json.dumps([blas, sorted(k for k in os.environ if k.endswith("_NUM_THREADS"))]))
"""


def test_a_fast_search_loads_numpy_with_one_blas_thread_and_leaves_the_environment_be():
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    run = [sys.executable, "-c", ONE_BLAS_THREAD]
    out = subprocess.run(run, capture_output=True, text=True, check=True, env=env)
    assert json.loads(out.stdout) == [[1], []]
    env["OMP_NUM_THREADS"] = "2"  # the user's choice stands
    out = subprocess.run(run, capture_output=True, text=True, check=True, env=env)
    assert json.loads(out.stdout) == [[2], ["OMP_NUM_THREADS"]]


def test_the_kbase_script_is_the_entry_that_leaves_at_once():
    """The console script runs kbase.cli.entry (main with os._exit after a fast search); the
    test above runs the same function through `python -m kbase.cli`."""
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["kbase"] == "kbase.cli:entry"


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


def test_a_mine_with_work_loads_neither_the_cli_framework_nor_numpy(tmp_path):
    """`kbase mine` runs through kbase.mine_cli (no typer); a large header changed in one
    commit is parsed incrementally without numpy."""
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
    assert "kbase.ingest.mining" in mods and "kbase.mine_cli" in mods
    assert not _heavy(mods) and not _areas(mods)
    assert not [m for m in ("typer", "click", "numpy", "rich") if m in mods]


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


def test_a_finished_mine_exits_without_tearing_the_interpreter_down(tmp_path):
    """kbase.cli.entry skips the interpreter's teardown (atexit handlers, freeing every object)
    after a mine that finished, once its output is flushed; other commands exit as usual."""
    repo, root = _one_kernel_repo(tmp_path)
    driver = (
        "import atexit, sys; atexit.register(lambda: sys.stderr.write('TEARDOWN'));"
        "sys.argv = ['kbase', *sys.argv[1:]]; from kbase.cli import entry; entry()"
    )
    mine = ["mine", "--repo", str(repo), "--name", "demo", "--root", str(root), "--json"]
    for args, torn_down in ((mine, False), (["list", "--root", str(root), "--json"], True)):
        out = subprocess.run(
            [sys.executable, "-c", driver, *args], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        assert ("TEARDOWN" in out.stderr) is torn_down, (args[0], out.stderr[-500:])
    assert json.loads(out.stdout) is not None
    report = (root / "pr_archive" / "demo" / ".state.json").read_text()
    assert json.loads(report)["commits_mined"] == 1  # written whole before the exit
