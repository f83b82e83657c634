"""Cards as index entries, staleness dates, the card text format, recipes, symbols, and the CLI."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from conftest import CliRun, run_cli
from kbase.ingest.card_format import fast_meta, render_card, split_card
from kbase.ingest.card_history import latest_touch
from kbase.ingest.recipes import RecipeError, load_recipe_file
from mining_fixtures import load_card_entries

from kbase.schema import FileChange, PRCard, Tags
from kbase.schema.archive import compile_globs

REPO_ROOT = Path(__file__).resolve().parents[1]


def glob_match(path: str, patterns: list[str]) -> bool:
    return compile_globs(tuple(patterns)).match(path) is not None


def make_card(
    pr: int,
    date: str,
    paths: list[str],
    repo: str = "demo",
    title: str | None = None,
    families: list[str] | None = None,
    categories: list[str] | None = None,
) -> PRCard:
    files = [
        FileChange(path=p, added=3, deleted=1, symbols=[f"sym_{pr}_{i}"])
        for i, p in enumerate(paths)
    ]
    return PRCard(
        repo=repo,
        pr=pr,
        url=f"https://github.com/example/{repo}/pull/{pr}",
        sha=f"{pr:040x}",
        date=date,
        title=title or f"Change number {pr}",
        families=families or [],
        files=files,
        totals={"files": len(files), "added": 3 * len(files), "deleted": len(files)},
        categories=categories or ["other"],
        tags=Tags(kernel_types=["attention"], languages=["cuda-cpp"]),
    )


def write(root: Path, card: PRCard, notes: str = "") -> Path:
    p = root / "pr_archive" / card.repo / f"{card.pr}.md"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(render_card(card, notes))
    return p


@pytest.mark.parametrize(
    "title",
    [
        'Revert "x: y (#1)"',
        "yes",
        "123",
        "- starts with dash",
        "# hash",
        "colon: here",
        "中文标题：修复 注意力",
        'quote\'s "double"',
        "null",
        "back\\slash",
        "  ~  ",
    ],
)
def test_front_matter_round_trips_awkward_titles(title):
    card = make_card(
        7, "2024-05-01T10:00:00+08:00", ["a b/c d.py", "0x10.cu", "true"], title=title.strip()
    )
    card.files[0].symbols = ["on", "Foo::bar", "No"]
    parts = split_card(render_card(card))
    back = PRCard.model_validate(parts.meta)
    assert back == card
    # the fast reader and PyYAML agree on what the miner writes
    assert fast_meta(parts.yaml_text) is not None
    assert fast_meta(parts.yaml_text) == yaml.safe_load(parts.yaml_text)


def test_hand_edited_front_matter_goes_through_yaml(tmp_path):
    card = make_card(3, "2024-05-01T10:00:00+08:00", ["a.py"], families=["decode"])
    text = render_card(card).replace(
        "families: [decode]", "families:\n  - decode   # edited by hand\n  - prefill"
    )
    parts = split_card(text)
    assert fast_meta(parts.yaml_text) is None
    assert parts.meta["families"] == ["decode", "prefill"]
    write(tmp_path, card)
    (tmp_path / "pr_archive" / "demo" / "3.md").write_text(text)
    entries, problems = load_card_entries(tmp_path)
    assert problems == [] and entries[0].families == ["decode", "prefill"]


def test_hand_edited_files_mapping_is_a_problem_not_a_crash(tmp_path):
    # `files:` then an indented key (a mapping where kbase writes a list): fast_meta indexed the
    # empty list and raised IndexError out of the index run
    card = make_card(4, "2024-05-01T10:00:00+08:00", ["a.py"])
    write(tmp_path, card)
    text = render_card(card).replace("files:\n- path: a.py", "files:\n  path: a.py")
    (tmp_path / "pr_archive" / "demo" / "4.md").write_text(text)
    assert fast_meta(split_card(text).yaml_text) is None
    entries, problems = load_card_entries(tmp_path)
    assert entries == [] and [(p.path, p.field) for p in problems] == [
        ("pr_archive/demo/4.md", "files")
    ]


def test_load_card_entries_ids_tags_chunks_and_hash(tmp_path):
    c1 = make_card(
        11,
        "2024-05-01T10:00:00+08:00",
        ["include/attn/decode.cuh"],
        families=["decode"],
        categories=["perf", "fusion"],
    )
    p1 = write(tmp_path, c1, notes="## Notes\n\nSplit-k helped only for long contexts.\n")
    write(tmp_path, make_card(12, "2024-05-02T10:00:00+08:00", ["docs/x.md"]))
    write(tmp_path, make_card(5, "2023-01-02T10:00:00+00:00", ["src/a.py"], repo="other"))
    (tmp_path / "pr_archive" / "recipes").mkdir()
    (tmp_path / "pr_archive" / "recipes" / "demo.yaml").write_text("name: demo\n")
    (tmp_path / "pr_archive" / "README.md").write_text("# archive\n")
    (tmp_path / "pr_archive" / "demo" / "README.md").write_text("# demo archive\n")

    entries, problems = load_card_entries(tmp_path)
    assert problems == []
    by_id = {e.id: e for e in entries}
    assert set(by_id) == {"pr:demo#11", "pr:demo#12", "pr:other#5"}
    e = by_id["pr:demo#11"]
    assert (e.kind, e.repo, e.pr, e.path, e.line) == ("pr", "demo", 11, "pr_archive/demo/11.md", 1)
    assert (
        e.date == "2024-05-01T10:00:00+08:00"
        and e.families == ["decode"]
        and e.categories == ["perf", "fusion"]
    )
    assert e.content_hash == hashlib.sha256(p1.read_text().encode()).hexdigest()
    assert {
        "kernel_types=attention",
        "languages=cuda-cpp",
        "family=decode",
        "category=perf",
        "category=fusion",
        "repo=demo",
    } <= set(e.tags)
    sections = [c.section for c in e.chunks]
    assert sections == ["summary", "files", "notes"]
    assert [c.id for c in e.chunks] == ["pr:demo#11::0", "pr:demo#11::1", "pr:demo#11::2"]
    assert all(c.kind == "pr" and c.entry_id == e.id and c.path == e.path for c in e.chunks)
    assert "include/attn/decode.cuh: sym_11_0" in e.chunks[1].text
    assert "Split-k helped" in e.chunks[2].text
    lines = p1.read_text().split("\n")
    assert lines[e.chunks[2].line - 1] == "## Notes"
    assert lines[e.chunks[0].line - 1] == "## Summary"
    # an untouched Notes placeholder is not a notes chunk
    assert [c.section for c in by_id["pr:demo#12"].chunks] == ["summary", "files"]


def test_large_prs_get_several_short_files_chunks(tmp_path):
    from kbase.ingest.cards import FILES_PER_CHUNK

    paths = [f"src/m{i:03d}.cu" for i in range(2 * FILES_PER_CHUNK + 3)]
    write(tmp_path, make_card(40, "2024-05-01T10:00:00+08:00", paths))
    (e,), _ = load_card_entries(tmp_path)
    files = [c for c in e.chunks if c.section == "files"]
    assert len(files) == 3
    listed = [ln.split(":")[0] for c in files for ln in c.text.split("\n")[1:]]
    assert listed == paths  # every file once, in order
    assert all(c.text.startswith("Files changed by demo PR #40 (Change number 40):") for c in files)


def test_bad_cards_become_problems_with_line_and_field(tmp_path):
    good = write(tmp_path, make_card(1, "2024-05-01T10:00:00+08:00", ["a.py"]))
    text = good.read_text()
    folder = good.parent
    (folder / "2.md").write_text(text.replace("pr: 1", "pr: two"))
    (folder / "3.md").write_text(text.replace("pr: 1", "pr: 3").replace("sha: ", "shaa: "))
    (folder / "4.md").write_text(
        text.replace("pr: 1", "pr: 4").replace("title: ", "title: [unclosed")
    )
    (folder / "5.md").write_text("no front matter\n")
    (folder / "6.md").write_text(text.replace("pr: 1", "pr: 7"))
    (folder / "8.md").write_text(
        text.replace("pr: 1", "pr: 8").replace(
            'date: "2024-05-01T10:00:00+08:00"', "date: yesterday"
        )
    )
    entries, problems = load_card_entries(tmp_path)
    assert [e.id for e in entries] == ["pr:demo#1"]
    got = {(Path(p.path).name, p.field): p for p in problems}
    assert got[("2.md", "pr")].line == 3
    assert ("3.md", "sha") in got and ("3.md", "shaa") in got  # missing key, unknown key
    assert (
        got[("3.md", "shaa")].line
        == text.split("\n").index(next(ln for ln in text.split("\n") if ln.startswith("sha:"))) + 1
    )
    p4 = next(p for p in problems if p.path.endswith("4.md"))
    assert "malformed YAML" in p4.message and p4.line in (
        7,
        8,
    )  # the title line, or where the parser noticed
    p5 = next(p for p in problems if p.path.endswith("5.md"))
    assert p5.line == 1 and "front-matter" in p5.message
    assert "does not match the file name" in got[("6.md", "pr")].message
    assert got[("8.md", "date")].message.startswith("date 'yesterday'")
    assert all(p.path.startswith("pr_archive/demo/") for p in problems)


def test_latest_touch_globs_and_timezones(tmp_path):
    write(
        tmp_path,
        make_card(1, "2024-03-01T23:00:00-08:00", ["include/flashinfer/attention/decode.cuh"]),
    )
    # 02:00 UTC on March 2nd: earlier than #1 (07:00 UTC) although its date string sorts after it
    write(
        tmp_path,
        make_card(2, "2024-03-02T10:00:00+08:00", ["include/flashinfer/attention/hopper/x.cuh"]),
    )
    write(tmp_path, make_card(3, "2024-03-05T00:00:00+00:00", ["flashinfer/sampling.py"]))
    root = tmp_path
    first, second = "2024-03-01T23:00:00-08:00", "2024-03-02T10:00:00+08:00"
    for glob, want in (
        ("include/flashinfer/attention/decode.cuh", first),
        ("include/flashinfer/attention/*.cuh", first),
        ("include/flashinfer/attention/**", first),
        ("include/flashinfer/attention/hopper", second),
        ("include/flashinfer/*/hopper/*.cuh", second),
    ):
        assert latest_touch(root, "demo", [glob]) == want, glob
    assert latest_touch(root, "demo", ["**/*.py", "nothing/*"]) == "2024-03-05T00:00:00+00:00"
    assert latest_touch(root, "demo", ["csrc/**"]) is None
    assert latest_touch(root, "absent", ["**"]) is None
    # the cache notices an edited card
    write(
        tmp_path,
        make_card(3, "2024-03-06T00:00:00+00:00", ["flashinfer/sampling.py", "csrc/norm.cu"]),
    )
    assert latest_touch(root, "demo", ["csrc/**"]) == "2024-03-06T00:00:00+00:00"


def test_glob_semantics():
    assert glob_match("lmdeploy/pytorch/models/qwen3_moe.py", ["lmdeploy/pytorch/models/qwen3*.py"])
    assert not glob_match(
        "lmdeploy/pytorch/models/sub/qwen3.py", ["lmdeploy/pytorch/models/qwen3*.py"]
    )
    assert glob_match("a/x/y/z.cu", ["a/**/*.cu"]) and glob_match("a/z.cu", ["a/**/*.cu"])
    assert glob_match("src/x/y.h", ["src/"]) and not glob_match("srcx/y.h", ["src"])
    assert glob_match("k/v1.cu", ["k/v[0-9].cu"]) and not glob_match("k/va.cu", ["k/v[0-9].cu"])
    # a wildcard pattern matches whole paths only, never a directory's contents (as git's)
    assert not glob_match("csrc/gqa/mha.cu", ["csrc/*gqa*"])
    assert glob_match("csrc/gqa/mha.cu", ["csrc/gqa"]) and glob_match(
        "csrc/gqa/mha.cu", ["csrc/gqa/"]
    )
    with pytest.raises(ValueError, match="matches no file"):
        glob_match("csrc/gqa/mha.cu", ["csrc/*gqa/"])


GIT_PATHS = [
    "csrc/gqa/mha.cu",
    "csrc/gqa/sub/deep.cuh",
    "csrc/fused_gqa.cu",
    "csrc/gqa.py",
    "csrc/other.cu",
    "include/attn/sparse_gqa_sm120/arch/barrier.cuh",
    "include/attn/gqa_decode.cuh",
    "src/x/y.h",
    "srcx/y.h",
    "a/z.cu",
    "a/x/y/z.cu",
]
GIT_PATTERNS = [
    "csrc/*gqa*", "csrc/gqa", "csrc/gqa/", "csrc/gqa/*", "csrc/gqa/**", "csrc/*", "csrc/**",
    "csrc/g?a", "csrc/[g]qa", "c*/gqa", "**/gqa", "**/*.cu", "csrc/**/deep.cuh",
    "include/attn/*gqa*", "include/attn/*gqa*/**", "src", "src/", "a/**/*.cu", "a/*.cu",
    "*.cu", "**/arch/*",
]  # fmt: skip


def test_globs_match_what_git_pathspecs_match(tmp_path):
    """A family's PR set can be checked with `git log -- ':(glob)PATTERN'` (issue #12: a family
    held PRs whose files only sat in a directory a wildcard pattern named)."""
    import subprocess

    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for i, rel in enumerate(GIT_PATHS):  # one commit per path
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(f"{i}\n")
        subprocess.run(["git", "-C", str(repo), "add", rel], check=True)
        subprocess.run(
            ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@e"]
            + ["commit", "-qm", rel],
            check=True,
        )
    for pattern in GIT_PATTERNS:
        out = subprocess.run(
            ["git", "-C", str(repo), "log", "--format=%s", "--", f":(glob){pattern}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        want = sorted(out)
        assert want == sorted(p for p in GIT_PATHS if glob_match(p, [pattern])), pattern
    assert any(glob_match(p, ["csrc/*gqa*"]) for p in GIT_PATHS)  # not a vacuous check


def test_recipe_errors_name_line_and_field(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text(
        "name: demo\nupstream: ftp://nope\nfamilies:\n  qwen3: []\n  Bad Name: [x]\nextra: 1\n"
    )
    with pytest.raises(RecipeError) as ei:
        load_recipe_file(p)
    fields = {(pr.field, pr.line) for pr in ei.value.problems}
    assert ("upstream", 2) in fields and ("extra", 6) in fields and ("families", 3) in fields
    p.write_text("name: demo\nfamilies: [unclosed\n")
    with pytest.raises(RecipeError, match="malformed YAML"):
        load_recipe_file(p)
    # a reversed range in a character class is the recipe's error, not re.error from the miner
    p.write_text("name: demo\nfamilies:\n  norm:\n    - csrc/norm.cu\n    - csrc/[z-a]*.cu\n")
    with pytest.raises(RecipeError, match=r"bad character class") as ei:
        load_recipe_file(p)
    assert [(pr.field, pr.line) for pr in ei.value.problems] == [("families", 2)]


@pytest.mark.parametrize("name", ["lmdeploy", "flashinfer", "vllm", "sglang"])
def test_shipped_recipes_load(name):
    r = load_recipe_file(REPO_ROOT / "pr_archive" / "recipes" / f"{name}.yaml")
    assert r.name == name and r.upstream.startswith("https://github.com/") and len(r.families) >= 10


def _kbase(*args: str, cwd: Path) -> CliRun:
    return run_cli(*args, cwd=cwd)


def test_cli_mine_history_and_errors(tmp_path):
    git = pytest.importorskip("git")
    repo = git.Repo.init(tmp_path / "repo", initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "T").set_value("user", "email", "t@example.invalid")
    work = Path(repo.working_dir)
    for i, (path, msg) in enumerate(
        [
            ("models/qwen3.py", "Add qwen3 (#1)"),
            ("models/llama.py", "Add llama (#2)"),
            ("models/qwen3.py", "Fix qwen3 rope (#3)"),
        ]
    ):
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(f"def f{i}():\n    return {i}\n")
        repo.git.add(path)
        with repo.git.custom_environment(GIT_COMMITTER_DATE=f"2024-01-0{i + 1}T00:00:00+00:00"):
            repo.git.commit("-q", "-m", msg)
    kb = tmp_path / "kb"
    (kb / "pr_archive" / "recipes").mkdir(parents=True)
    (kb / "pr_archive" / "recipes" / "demo.yaml").write_text(
        "name: demo\nupstream: https://github.com/example/demo\nfamilies:\n  qwen3: "
        "[models/qwen3*.py]\n"
    )

    r = _kbase(
        "mine", "--repo", str(work), "--name", "demo", "--root", str(kb), "--json", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["mode"], out["prs"], out["written"]) == ("full", 3, 3)

    r = _kbase("history", "qwen3", "--repo", "demo", "--root", str(kb), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["prs"]
    assert [(x["pr"], x["files"], x["categories"]) for x in rows] == [  # newest first
        (3, ["models/qwen3.py"], ["fix"]),
        (1, ["models/qwen3.py"], ["feature"]),
    ]
    assert rows[-1]["date"] == "2024-01-01T00:00:00+00:00"
    history = ("history", "qwen3", "--repo", "demo", "--root", str(kb), "--json")
    r = _kbase(*history, "--limit", "1", cwd=tmp_path)
    page = json.loads(r.stdout)
    assert [x["pr"] for x in page["prs"]] == [3] and page["total"] == 2 and page["next_cursor"]
    r = _kbase(*history, "--cursor", page["next_cursor"], cwd=tmp_path)
    assert [x["pr"] for x in json.loads(r.stdout)["prs"]] == [1]
    r = _kbase(
        "history",
        "qwen3",
        "--repo",
        "demo",
        "--root",
        str(kb),
        "--json",
        "--until",
        "2024-01-01",
        cwd=tmp_path,
    )
    assert [x["pr"] for x in json.loads(r.stdout)["prs"]] == [1]
    r = _kbase("history", "qwen3", "--repo", "demo", "--root", str(kb), cwd=tmp_path)
    assert r.returncode == 0 and "#3" in r.stdout

    r = _kbase("history", "nope", "--repo", "demo", "--root", str(kb), cwd=tmp_path)
    assert r.returncode == 1 and "unknown family 'nope'" in r.stderr and "qwen3" in r.stderr
    r = _kbase("mine", "--repo", str(tmp_path), "--name", "demo", "--root", str(kb), cwd=tmp_path)
    assert r.returncode == 2 and "not a git repository" in r.stderr
    r = _kbase(
        "mine",
        "--repo",
        str(work),
        "--name",
        "demo",
        "--recipe",
        "missing",
        "--root",
        str(kb),
        cwd=tmp_path,
    )
    assert r.returncode == 2 and "no recipe named 'missing'" in r.stderr
    r = _kbase("mine", "--repo", str(work), "--name", "Bad Name", "--root", str(kb), cwd=tmp_path)
    assert r.returncode == 2 and "kebab-case" in r.stderr


@pytest.mark.parametrize(
    "title,paths,cats",
    [
        ('Revert "perf: faster decode (#10)"', ["a.cu"], ["revert"]),
        ("[Fix] overflow in rmsnorm for long rows", ["kernels/norm.cu"], ["fix"]),
        ("feat(moe): support fp8 grouped gemm", ["csrc/moe.cu"], ["feature", "quantization"]),
        ("Fuse silu and mul into one kernel", ["csrc/act.cu"], ["fusion"]),
        ("Update guide", ["docs/en/guide.md", "README.md"], ["docs"]),
        ("bump version to v0.4.1", ["lmdeploy/version.py"], ["release"]),
        ("tidy workflow", [".github/workflows/ci.yml"], ["refactor", "ci"]),
        ("Miscellaneous", ["src/x.py"], ["other"]),
    ],
)
def test_categories(title, paths, cats):
    from kbase.ingest.classify import categories

    assert categories(title, paths) == cats


def test_tags_from_title_and_paths():
    from kbase.ingest.classify import reverted_pr, tags

    t = tags(
        "fused moe fp8 for sm90 hopper",
        [
            "csrc/fused_moe/x.cu",
            "flashinfer/triton/norm.py",
            "include/attention_sm80_128.cuh",
            "tests/test_rope.py",
        ],
    )
    assert t.languages == ["cuda-cpp", "python", "triton"]
    assert set(t.kernel_types) == {
        "attention",
        "moe",
        "norm",
        "quantization",
    }  # tests/ paths do not count
    assert t.archs == ["sm90", "sm80"] and {"fusion", "fp8"} <= set(t.techniques)
    assert reverted_pr('Revert "x (#12)" (#15)') == 12 and reverted_pr("revert #33 for now") == 33
