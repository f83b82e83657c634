"""The whole history on cards: direct pushes, descriptions, revert links both ways, history by
path, and repositories in the shapes people have them (bare with or without config, worktrees)."""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

git = pytest.importorskip("git")

from kbase.ingest.card_format import split_card  # noqa: E402
from kbase.ingest.mine_cache import CACHE_FILE  # noqa: E402
from kbase.ingest.mine_state import recipe_fingerprint  # noqa: E402
from kbase.ingest.mining import mine  # noqa: E402
from mining_fixtures import load_card_entries  # noqa: E402
from procs import kill9_when  # noqa: E402

from kbase.schema import PRCard, Recipe  # noqa: E402

RECIPE = Recipe(
    name="demo",
    upstream="https://github.com/example/demo",
    families={"norm": ["kernels/norm/**"]},
)
BODY = """<!-- .github/pull_request_template.md -->
## Description

Fuse the residual add into RMSNorm; 1.7x faster on H100 at 3.1 TB/s. Fixes #40.

## Checklist

- [x] I have run pre-commit
- [ ] Tests added

Co-authored-by: Ada Lovelace <redacted>
"""


def _repo(tmp: Path):
    repo = git.Repo.init(tmp / "repo", initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "T").set_value("user", "email", "t@example.invalid")
    return repo


def _commit(repo, msg: str, files: dict[str, str], day: int) -> str:
    work = Path(repo.working_dir)
    for rel, text in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
        repo.git.add(rel)
    stamp = f"2024-03-{day:02d}T00:00:00+00:00"
    with repo.git.custom_environment(GIT_AUTHOR_DATE=stamp, GIT_COMMITTER_DATE=stamp):
        repo.git.commit("-q", "--allow-empty", "-m", msg)
    return repo.head.commit.hexsha


def _history(tmp: Path):
    repo = _repo(tmp)
    kern = "__global__ void RMSNormKernel(float* y) {\n  y[0] = 1.f;\n}\n"
    _commit(repo, "init", {"README.md": "x\n"}, 1)
    pr = _commit(
        repo, f"Fuse residual into rmsnorm (#41)\n\n{BODY}", {"kernels/norm/rms.cu": kern}, 2
    )
    push = _commit(
        repo, "tweak rmsnorm block size", {"kernels/norm/rms.cu": kern.replace("1.f", "2.f")}, 3
    )
    rev = _commit(
        repo,
        f'Revert "tweak rmsnorm block size"\n\nThis reverts commit {push}.',
        {"kernels/norm/rms.cu": kern},
        4,
    )
    _commit(repo, 'Revert "Fuse residual into rmsnorm (#41)" (#43)', {"README.md": "y\n"}, 5)
    return repo, {"pr": pr, "push": push, "rev": rev}


def _load(root: Path, stem: str) -> tuple[PRCard, str]:
    text = (root / "pr_archive" / "demo" / f"{stem}.md").read_text()
    return PRCard.model_validate(split_card(text).meta), text


def test_description_pushes_and_reverts_on_cards(tmp_path):
    repo, shas = _history(tmp_path)
    root = tmp_path / "kb"
    rep = mine(repo.working_dir, root, RECIPE)
    assert (rep.prs, rep.direct_pushes) == (2, 3)  # init, the tweak and its revert are pushes
    c41, text = _load(root, "41")
    assert "1.7x faster on H100" in c41.description and "Checklist" not in c41.description
    assert "pre-commit" not in c41.description and "redacted" not in c41.description
    assert c41.co_authors == ["Ada Lovelace"] and c41.issues == [40]
    assert {"1.7x", "3.1 TB/s"} <= set(c41.numbers)
    assert c41.reverted_by == ["#43"] and c41.touched == ["RMSNormKernel"]
    assert "## Description" in text and "## Key diff" in text and "## Links" in text
    c43, _ = _load(root, "43")
    assert c43.reverts == 41
    push, _ = _load(root, f"commit-{shas['push'][:12]}")
    assert push.kind == "commit" and push.pr is None and push.families == ["norm"]
    assert push.url == f"https://github.com/example/demo/commit/{shas['push']}"
    assert push.reverted_by == [shas["rev"][:12]]
    rev, _ = _load(root, f"commit-{shas['rev'][:12]}")
    assert rev.reverts_commit == shas["push"][:12] and "revert" in rev.categories

    entries, problems = load_card_entries(root)
    assert problems == []
    ids = {e.id for e in entries}
    assert f"commit:demo@{shas['push'][:12]}" in ids and "pr:demo#41" in ids
    e41 = next(e for e in entries if e.id == "pr:demo#41")
    assert any(c.section == "description" and "1.7x faster" in c.text for c in e41.chunks)
    assert "card=pr" in e41.tags
    epush = next(e for e in entries if e.id.startswith("commit:"))
    assert epush.kind == "pr" and "card=commit" in epush.tags


@pytest.mark.parametrize("cache", ["1", "0"])
def test_a_full_remine_writes_each_revert_pair_once(tmp_path, monkeypatch, cache):
    """A reverted card is written once, with its `reverted_by`: cards are written after the
    stream, once every revert link is known."""
    monkeypatch.setenv("KBASE_MINE_CACHE", cache)
    repo, shas = _history(tmp_path)
    root = tmp_path / "kb"
    first = mine(repo.working_dir, root, RECIPE)
    assert (first.written, first.unchanged) == (5, 0)  # each card once, reverted ones too
    folder = root / "pr_archive" / "demo"
    before = {p.name: p.read_bytes() for p in folder.glob("*.md")}
    again = mine(repo.working_dir, root, RECIPE, full=True)
    assert (again.written, again.unchanged) == (0, 5)
    assert {p.name: p.read_bytes() for p in folder.glob("*.md")} == before
    c41, _ = _load(root, "41")
    push, _ = _load(root, f"commit-{shas['push'][:12]}")
    assert c41.reverted_by == ["#43"] and push.reverted_by == [shas["rev"][:12]]


def test_history_by_family_and_by_path_includes_direct_pushes(tmp_path):
    repo, shas = _history(tmp_path)
    root = tmp_path / "kb"
    mine(repo.working_dir, root, RECIPE)

    def kbase(*args: str) -> dict:
        r = subprocess.run(
            [sys.executable, "-m", "kbase.cli", *args, "--root", str(root), "--json"],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    fam = kbase("history", "norm", "--repo", "demo")["prs"]
    # newest first
    assert [(r["pr"], r["kind"]) for r in fam] == [(None, "commit"), (None, "commit"), (41, "pr")]
    assert fam[1]["sha"] == shas["push"]
    by_path = kbase("history", "--repo", "demo", "--path", "README.md")["prs"]
    assert [r["pr"] for r in by_path] == [43, None]


def test_bare_mirrors_with_and_without_config_and_worktrees(tmp_path):
    repo, _ = _history(tmp_path)
    ref = mine(repo.working_dir, tmp_path / "kb0", RECIPE)
    bare = tmp_path / "mirror.git"
    subprocess.run(["git", "clone", "-q", "--mirror", repo.working_dir, str(bare)], check=True)
    assert mine(bare, tmp_path / "kb1", RECIPE).prs == ref.prs
    (bare / "config").unlink()
    rep = mine(bare, tmp_path / "kb2", RECIPE)
    assert (rep.prs, rep.direct_pushes) == (ref.prs, ref.direct_pushes)
    wt = tmp_path / "wt"
    repo.git.worktree("add", "-q", str(wt), "HEAD")
    assert mine(wt, tmp_path / "kb3", RECIPE).prs == ref.prs
    a = sorted(p.name for p in (tmp_path / "kb0" / "pr_archive" / "demo").glob("*.md"))
    b = sorted(p.name for p in (tmp_path / "kb2" / "pr_archive" / "demo").glob("*.md"))
    assert a == b


def test_since_over_a_mined_range_and_a_pr_merged_twice_keep_their_facts(tmp_path):
    repo = _repo(tmp_path)
    _commit(repo, "init", {"README.md": "x\n"}, 1)
    first = _commit(repo, "Add norm kernel (#7)", {"kernels/norm/a.cu": "void f() {}\n"}, 2)
    root = tmp_path / "kb"
    mine(repo.working_dir, root, RECIPE)
    _commit(repo, "Add norm kernel, part two (#7)", {"kernels/norm/b.cu": "void g() {}\n"}, 3)
    mine(repo.working_dir, root, RECIPE)
    before = (root / "pr_archive" / "demo" / "7.md").read_text()
    card, _ = _load(root, "7")
    assert sorted(f.path for f in card.files) == ["kernels/norm/a.cu", "kernels/norm/b.cu"]
    assert card.also == [first]
    mine(repo.working_dir, root, RECIPE, since=first)  # over a range already mined
    mine(repo.working_dir, root, RECIPE, since="HEAD~2")
    assert (root / "pr_archive" / "demo" / "7.md").read_text() == before
    shutil.rmtree(root / "pr_archive" / "demo")
    mine(repo.working_dir, root, RECIPE)
    assert (root / "pr_archive" / "demo" / "7.md").read_text() == before


def test_without_a_recipe_origin_gives_links_and_suggest_and_lint_help(tmp_path):
    from kbase.ingest.recipes import lint_families, repo_paths, suggest_families

    repo = _repo(tmp_path)
    files = {
        "csrc/rmsnorm.cu": "void a() {}\n",
        "csrc/rmsnorm_fused.cu": "void b() {}\n",
        "include/x/rmsnorm.cuh": "void c() {}\n",
        "csrc/moe_topk_renorm.cu": "void d() {}\n",
        "csrc/moe_align.cu": "void e() {}\n",
        "csrc/moe_route.cu": "void f() {}\n",
        "flashx/attention/blackwell/a.py": "x = 1\n",
        "flashx/attention/blackwell/b.py": "x = 1\n",
        "flashx/attention/blackwell/c.py": "x = 1\n",
    }
    _commit(repo, "Add kernels (#1)", files, 1)
    repo.git.remote("add", "origin", "git@github.com:example/flashx.git")
    rep = mine(repo.working_dir, tmp_path / "kb", Recipe(name="flashx"))
    card, _ = _load_named(tmp_path / "kb", "flashx", "1")
    assert card.url == "https://github.com/example/flashx/pull/1" and rep.prs == 1

    paths = repo_paths(str(Path(repo.git_dir)))
    fams = suggest_families(paths)
    assert fams["rmsnorm"] == ["csrc/*rmsnorm*.cu", "include/x/*rmsnorm*.cuh"]
    assert fams["moe"] == ["csrc/*moe*.cu"] and fams["blackwell"] == [
        "flashx/attention/blackwell/**"
    ]
    problems = lint_families(
        {"norm": ["csrc/*norm*.cu", "csrc/gone_*.cu"], "moe": ["csrc/moe_*"]}, paths
    )
    msgs = {(p.glob, p.message.split(" (")[0]) for p in problems}
    assert ("csrc/gone_*.cu", "matches no path in the repository's history") in msgs
    stray = next(p for p in problems if p.glob == "csrc/*norm*.cu")
    assert stray.examples == ["csrc/moe_topk_renorm.cu"] and "moe" in stray.message
    left: list[str] = []
    capped = suggest_families(paths, limit=1, left_out=left)
    assert len(capped) == 1 and set(capped) | set(left) == set(fams)  # nothing dropped unsaid


def _load_named(root: Path, name: str, stem: str) -> tuple[PRCard, str]:
    text = (root / "pr_archive" / name / f"{stem}.md").read_text()
    return PRCard.model_validate(split_card(text).meta), text


def test_a_killed_mine_reruns_from_its_cache_byte_identical(tmp_path):
    import os

    repo = _repo(tmp_path)
    for i in range(80):
        body = f"__global__ void K{i % 7}(float* y) {{\n  y[{i}] = {i}.f;\n}}\n"
        msg = f"Tune kernel {i} (#{i + 1})" if i % 3 else f"direct tweak {i}"
        _commit(repo, msg, {f"kernels/norm/k{i % 9}.cu": body}, 1 + i % 28)
    recipe_file = tmp_path / "demo.yaml"
    recipe_file.write_text(
        "name: demo\nupstream: https://github.com/example/demo\n"
        "families:\n  norm: ['kernels/norm/**']\n"
    )
    ref = tmp_path / "ref"
    (ref / "pr_archive").mkdir(parents=True)
    # the state names the recipe file by its bytes, as the command line's mine does
    mine(repo.working_dir, ref, RECIPE, recipe_fingerprint=recipe_fingerprint(recipe_file))

    def snap(root: Path) -> dict[str, str]:
        out = {}
        for p in sorted((root / "pr_archive" / "demo").iterdir()):
            text = p.read_text()
            if p.name == ".state.json":
                text = json.dumps({k: v for k, v in json.loads(text).items() if k != "mined_at"})
            out[p.name] = text
        return out

    root = tmp_path / "kb"
    (root / "pr_archive").mkdir(parents=True)
    cmd = [sys.executable, "-m", "kbase.cli", "mine", "--repo", repo.working_dir, "--name", "demo"]
    cmd += ["--root", str(root), "--recipe", str(recipe_file), "--json"]
    env = {**os.environ, "KBASE_MINE_FLUSH_EVERY": "5"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    folder = root / "pr_archive" / "demo"

    def flushed() -> int:
        """Commits whose facts the mine has committed to its cache (read-only: WAL readers never
        block the writer). Cards are written only after the stream, and the state right after
        them, so a kill timed by cards could land after the state (seen in CI on a loaded host)."""
        db = root / ".kbase" / "cache" / CACHE_FILE
        if not db.exists():
            return 0
        try:
            with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
                return con.execute("SELECT count(*) FROM items WHERE k LIKE 'commit:%'").fetchone()[
                    0
                ]
        except sqlite3.Error:  # created but not yet a database
            return 0

    # the first flush (5 commits) is mid-stream: no card, no state written yet
    kill9_when(proc, lambda: flushed() >= 5, "mine", timeout_s=120)
    assert not (folder / ".state.json").exists()  # the state is written last
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rerun = json.loads(r.stdout)
    assert rerun["commits_cached"] >= 5 and rerun["cards_cached"] >= 5
    assert snap(root) == snap(ref)


def test_recipe_suggest_writes_a_draft_that_recipe_lint_json_reads(tmp_path):
    """`kbase recipe lint --json` on the draft `recipe suggest --write` made (issue #27: the
    JSON path raised TypeError on every call)."""
    import json
    import subprocess
    import sys

    repo = _repo(tmp_path)
    files = {f"csrc/rmsnorm_{i}.cu": "void a() {}\n" for i in range(3)}
    files.update({f"flashx/attention/blackwell/{c}.py": "x = 1\n" for c in "abc"})
    _commit(repo, "Add kernels (#1)", files, 1)
    kb = tmp_path / "kb"
    (kb / "pr_archive").mkdir(parents=True)
    cli = [sys.executable, "-m", "kbase.cli", "recipe"]
    common = ["--repo", repo.working_dir, "--root", str(kb)]
    made = subprocess.run(
        [*cli, "suggest", *common, "--name", "flashx", "--write", "--json"],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    lint = subprocess.run(
        [*cli, "lint", "flashx", *common, "--json"], capture_output=True, text=True
    )
    assert "Traceback" not in lint.stderr, lint.stderr
    out = json.loads(lint.stdout)
    assert out["paths"] == len(files) and out["recipe"].endswith("flashx.yaml")
    assert lint.returncode == (1 if out["problems"] else 0)
    assert out["problems"] == [], out["problems"]


def test_key_diff_shows_the_kernel_file_not_what_git_lists_first(tmp_path):
    """Issue #27: hunks were kept in git's path order, 40 a commit, before files were ranked:
    a kernel under csrc/ behind 45 benchmark files had no excerpt, and a change outside any
    function got no key diff at all."""
    repo = _repo(tmp_path)
    kern = "__global__ void FusedKernel(float* y) {\n  y[0] = 1.f;\n}\n"
    bench = {f"benchmarks/b{i:02d}.py": f"N = {i}\n" for i in range(45)}
    _commit(repo, "init", {**bench, "csrc/fused.cu": kern, "csrc/cfg.h": "#define BLOCK 128\n"}, 1)
    bench2 = {k: v.replace("N =", "N = 2 *") for k, v in bench.items()}
    _commit(repo, "Speed up fused (#2)", {**bench2, "csrc/fused.cu": kern.replace("1.f", "2.f")}, 2)
    _commit(repo, "Bigger blocks (#3)", {"csrc/cfg.h": "#define BLOCK 256\n"}, 3)
    root = tmp_path / "kb"
    mine(repo.working_dir, root, RECIPE)
    _, two = _load(root, "2")
    diff = two.split("## Key diff", 1)[1]
    assert diff.index("--- csrc/fused.cu") < diff.find("benchmarks/") or "benchmarks/" not in diff
    assert "+  y[0] = 2.f;" in diff
    _, three = _load(root, "3")
    assert "## Key diff" in three and "+#define BLOCK 256" in three.split("## Key diff", 1)[1]
