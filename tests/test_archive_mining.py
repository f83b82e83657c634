"""`kbase mine` on real git repositories built here: PR styles, renames, binaries, reverts,
bad inputs, incremental runs, Notes preservation and rewritten history."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

git = pytest.importorskip("git")

from kbase.ingest.card_format import split_card  # noqa: E402
from kbase.ingest.card_history import timeline  # noqa: E402
from kbase.ingest.mining import MiningError, mine  # noqa: E402

from kbase.schema import PRCard, Recipe  # noqa: E402

RECIPE = Recipe(
    name="demo",
    upstream="https://github.com/example/demo",
    families={"qwen3": ["models/qwen3*.py"], "rmsnorm": ["kernels/norm/**"], "assets": ["assets/"]},
)


class Builder:
    """A real repository with a clock: every commit gets the next day's date."""

    def __init__(self, path: Path):
        self.path = path
        self.repo = git.Repo.init(path, initial_branch="main")
        with self.repo.config_writer() as cw:
            cw.set_value("user", "name", "Test").set_value("user", "email", "t@example.invalid")
        self.day = 0

    def _env(self) -> dict:
        self.day += 1
        stamp = (
            f"2024-01-{self.day:02d}T12:00:00+08:00"
            if self.day <= 28
            else f"2024-02-{self.day - 28:02d}T12:00:00+08:00"
        )
        return {"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}

    def write(self, files: dict[str, str | bytes | None]) -> None:
        for rel, content in files.items():
            p = self.path / rel
            if content is None:
                self.repo.git.rm("-q", rel)
                continue
            p.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                p.write_bytes(content)
            else:
                p.write_text(content)
            self.repo.git.add(rel)

    def commit(self, message: str, files: dict[str, str | bytes | None] | None = None) -> str:
        if files:
            self.write(files)
        with self.repo.git.custom_environment(**self._env()):
            self.repo.git.commit("-q", "--allow-empty", "-m", message)
        return self.repo.head.commit.hexsha

    def rename(self, old: str, new: str, message: str, edit: str | None = None) -> str:
        self.repo.git.mv(old, new)
        if edit is not None:
            (self.path / new).write_text(edit)
            self.repo.git.add(new)
        return self.commit(message)


QWEN_V1 = "import torch\n\n\nclass Qwen3Attention:\n    def forward(self, x):\n        return x\n"
QWEN_V2 = QWEN_V1 + "\n\ndef fused_qk_norm(q, k):\n    return q, k\n"
NORM_CU = """#include <cuda.h>

template <typename T>
__global__ void __launch_bounds__(256) RMSNormKernel(T* out, const T* x, int n) {
  int i = threadIdx.x;
  out[i] = x[i];
}

void launch_rmsnorm(float* out, const float* x, int n) {
  RMSNormKernel<<<1, 256>>>(out, x, n);
}
"""


def _base_history(b: Builder) -> dict[str, str]:
    shas = {}
    shas["init"] = b.commit("initial import", {"README.md": "demo\n"})
    shas["1"] = b.commit("[Feature] Add Qwen3 model (#1)", {"models/qwen3.py": QWEN_V1})
    shas["2"] = b.commit("Fix rmsnorm kernel overflow (#2)", {"kernels/norm/rmsnorm.cu": NORM_CU})
    shas["3"] = b.commit(
        "perf: fuse qk norm into qwen3 attention (#3)",
        {
            "models/qwen3.py": QWEN_V2,
            "kernels/norm/rmsnorm.cu": NORM_CU.replace("out[i] = x[i];", "out[i] = x[i] * 2;"),
        },
    )
    return shas


def _card(root: Path, pr: int, name: str = "demo") -> tuple[PRCard, str]:
    text = (root / "pr_archive" / name / f"{pr}.md").read_text()
    return PRCard.model_validate(split_card(text).meta), text


def test_squash_commits_become_cards_with_facts(tmp_path):
    b = Builder(tmp_path / "repo")
    shas = _base_history(b)
    root = tmp_path / "kb"
    rep = mine(b.path, root, RECIPE)
    assert (rep.mode, rep.commits, rep.prs, rep.without_pr) == ("full", 4, 3, 1)
    assert rep.without_pr_sample[0]["sha"] == shas["init"]
    cards = sorted(p.name for p in (root / "pr_archive" / "demo").glob("*.md"))
    # the commit pushed without a PR gets a commit card
    assert cards == ["1.md", "2.md", "3.md", f"commit-{shas['init'][:12]}.md"]

    c1, _ = _card(root, 1)
    assert c1.sha == shas["1"] and c1.title == "[Feature] Add Qwen3 model"
    assert c1.url == "https://github.com/example/demo/pull/1"
    assert c1.date.startswith("2024-01-02T12:00:00")
    assert c1.families == ["qwen3"] and "feature" in c1.categories
    assert c1.files[0].path == "models/qwen3.py" and c1.files[0].added == QWEN_V1.count("\n")
    # a method is named inside its class
    assert {"Qwen3Attention", "Qwen3Attention.forward"} <= set(c1.files[0].symbols)

    c2, text2 = _card(root, 2)
    assert c2.families == ["rmsnorm"] and "fix" in c2.categories
    assert {"RMSNormKernel", "launch_rmsnorm"} <= set(c2.files[0].symbols)
    assert not {"template", "T", "void", "__launch_bounds__"} & set(c2.files[0].symbols)
    assert "cuda-cpp" in c2.tags.languages and "norm" in c2.tags.kernel_types
    assert "## Notes" in text2 and "## Summary" in text2

    c3, _ = _card(root, 3)
    assert c3.families == ["qwen3", "rmsnorm"]
    assert {"perf", "fusion"} <= set(c3.categories)
    by_path = {f.path: f for f in c3.files}
    # the kernel edit sits inside RMSNormKernel: git's cpp hunk header names it
    assert "RMSNormKernel" in by_path["kernels/norm/rmsnorm.cu"].symbols
    assert (
        by_path["kernels/norm/rmsnorm.cu"].added == 1
        and by_path["kernels/norm/rmsnorm.cu"].deleted == 1
    )
    assert "fused_qk_norm" in by_path["models/qwen3.py"].symbols
    assert c3.totals == {"files": 2, "added": 1 + 4, "deleted": 1}


def _merged_branch(path: Path, branch: tuple[str, str], *merge_message: str) -> Builder:
    """A repository whose main line merges (--no-ff) a branch of two commits (their subjects:
    `branch`), with a docs PR (#5) on main in between."""
    b = Builder(path)
    b.commit("initial import", {"README.md": "demo\n"})
    b.repo.git.checkout("-q", "-b", "side")
    b.commit(branch[0], {"models/qwen3.py": QWEN_V1})
    b.commit(branch[1], {"models/qwen3_moe.py": "def route(x):\n    return x\n"})
    b.repo.git.checkout("-q", "main")
    b.commit("Docs tweak (#5)", {"docs/guide.md": "guide\n"})
    messages = [arg for m in merge_message for arg in ("-m", m)]
    with b.repo.git.custom_environment(**b._env()):
        b.repo.git.merge("-q", "--no-ff", "side", *messages)
    return b


def test_merge_commits_use_first_parent_and_body_title(tmp_path):
    b = _merged_branch(
        tmp_path / "repo",
        ("wip on branch (#99)", "more wip"),
        "Merge pull request #7 from someone/feature",
        "Support Qwen3 MoE routing",
    )
    merge_sha = b.repo.head.commit.hexsha
    docs = b.repo.head.commit.parents[0]
    assert len(b.repo.head.commit.parents) == 2 and docs.message.startswith("Docs tweak")

    root = tmp_path / "kb"
    rep = mine(b.path, root, RECIPE)
    found = sorted(int(p.stem) for p in (root / "pr_archive" / "demo").glob("[0-9]*.md"))
    assert found == [5, 7]  # "(#99)" is work inside PR #7's branch: the merge owns it
    c7, _ = _card(root, 7)
    assert c7.sha == merge_sha and c7.title == "Support Qwen3 MoE routing"
    assert sorted(f.path for f in c7.files) == ["models/qwen3.py", "models/qwen3_moe.py"]
    assert c7.families == ["qwen3"] and "feature" in c7.categories
    c5, _ = _card(root, 5)
    assert "docs" in c5.categories
    # every commit of the graph counts, the branch's two included; "#5" and "#7" are main's PRs
    assert rep.commits == 5 and rep.without_pr == 2 and rep.behind_merges == 0


def test_prs_behind_a_merge_that_names_no_pr_get_cards(tmp_path):
    b = _merged_branch(
        tmp_path / "repo", ("Add Qwen3 (#11)", "Route experts (#12)"), "merge dev to main"
    )
    root = tmp_path / "kb"
    rep = mine(b.path, root, RECIPE)
    found = sorted(int(p.stem) for p in (root / "pr_archive" / "demo").glob("[0-9]*.md"))
    assert found == [5, 11, 12]
    c11, _ = _card(root, 11)
    assert [f.path for f in c11.files] == ["models/qwen3.py"] and c11.families == ["qwen3"]
    assert rep.commits == 5 and rep.behind_merges == 2


def test_renames_binaries_and_reverts(tmp_path):
    b = Builder(tmp_path / "repo")
    b.commit("Add attention model (#1)", {"models/old_attn.py": QWEN_V1})
    b.commit(
        "Tune old attention (#2)",
        {"models/old_attn.py": QWEN_V1.replace("return x", "return x + 0")},
    )
    b.rename(
        "models/old_attn.py",
        "models/qwen3_attn.py",
        "Rename attention to qwen3 (#3)",
        edit=QWEN_V1.replace("return x", "return x + 0") + "# renamed\n",
    )
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    b.commit("Add logo (#4)", {"assets/logo.png": png})
    b.commit(
        'Revert "Tune old attention (#2)" (#5)', {"models/qwen3_attn.py": QWEN_V1 + "# renamed\n"}
    )

    root = tmp_path / "kb"
    mine(b.path, root, RECIPE)
    c3, _ = _card(root, 3)
    assert len(c3.files) == 1
    assert (c3.files[0].old_path, c3.files[0].path) == (
        "models/old_attn.py",
        "models/qwen3_attn.py",
    )
    assert c3.files[0].added == 1 and c3.files[0].deleted == 0
    assert c3.families == ["qwen3"]

    c4, text4 = _card(root, 4)
    assert c4.files[0].added is None and c4.files[0].deleted is None
    assert c4.totals["binary"] == 1 and c4.families == ["assets"]
    assert "(binary)" in text4

    c5, _ = _card(root, 5)
    assert "revert" in c5.categories and c5.reverts == 2

    # renames are followed backwards in the family timeline: PRs on the old name come along
    rows = timeline(root, "demo", "qwen3", RECIPE.families["qwen3"])
    assert [r["pr"] for r in rows] == [1, 2, 3, 5]
    assert [r["via_rename"] for r in rows] == [True, True, False, False]


def test_repo_without_pr_numbers_reports_them(tmp_path):
    b = Builder(tmp_path / "repo")
    for i in range(3):
        b.commit(f"change {i}", {f"f{i}.py": f"x = {i}\n"})
    root = tmp_path / "kb"
    rep = mine(b.path, root, RECIPE)
    assert (rep.commits, rep.prs, rep.without_pr, rep.direct_pushes) == (3, 0, 3, 3)
    assert [s["subject"] for s in rep.without_pr_sample] == ["change 2", "change 1", "change 0"]
    # direct pushes get commit cards, kind "commit", pr null, titled by their subject
    cards = sorted((root / "pr_archive" / "demo").glob("*.md"))
    assert rep.written == 3 and all(p.stem.startswith("commit-") for p in cards)
    loaded = [PRCard.model_validate(split_card(p.read_text()).meta) for p in cards]
    assert {(c.kind, c.pr) for c in loaded} == {("commit", None)}
    assert sorted(c.title for c in loaded) == ["change 0", "change 1", "change 2"]
    assert all(p.stem == f"commit-{c.sha[:12]}" for p, c in zip(cards, loaded, strict=True))


def test_shallow_clone_and_non_git_paths_are_refused(tmp_path):
    b = Builder(tmp_path / "repo")
    _base_history(b)
    shallow = tmp_path / "shallow"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{b.path}", str(shallow)], check=True
    )
    with pytest.raises(MiningError, match=r"shallow clone.*git fetch --unshallow"):
        mine(shallow, tmp_path / "kb", RECIPE)
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(MiningError, match="not a git repository"):
        mine(plain, tmp_path / "kb", RECIPE)
    with pytest.raises(MiningError, match="no such directory"):
        mine(tmp_path / "missing", tmp_path / "kb", RECIPE)
    empty = git.Repo.init(tmp_path / "empty")
    with pytest.raises(MiningError, match="no commits"):
        mine(empty.working_dir, tmp_path / "kb", RECIPE)


def test_incremental_noop_since_and_notes_preserved(tmp_path):
    b = Builder(tmp_path / "repo")
    _base_history(b)
    root = tmp_path / "kb"
    mine(b.path, root, RECIPE)
    folder = root / "pr_archive" / "demo"
    state = json.loads((folder / ".state.json").read_text())
    assert state["last_sha"] == b.repo.head.commit.hexsha

    card1 = folder / "1.md"
    note = "Measured 1.3x on H100 after this change.\n\n- follow-up: check fp8 path\n"
    card1.write_text(card1.read_text().split("## Notes")[0] + "## Notes\n\n" + note)
    before = {p.name: p.read_text() for p in folder.glob("*.md")}

    rep = mine(b.path, root, RECIPE)
    assert rep.mode == "noop" and rep.commits == 0 and rep.written == 0
    assert {p.name: p.read_text() for p in folder.glob("*.md")} == before

    b.commit(
        "Add qwen3 rope scaling (#4)",
        {"models/qwen3.py": QWEN_V2 + "\ndef rope_scale(x):\n    return x\n"},
    )
    rep = mine(b.path, root, RECIPE)
    assert (rep.mode, rep.commits, rep.prs, rep.written) == ("incremental", 1, 1, 1)
    assert card1.read_text() == before["1.md"]
    assert "rope_scale" in _card(root, 4)[0].files[0].symbols

    rep = mine(b.path, root, RECIPE, full=True)
    assert rep.mode == "full" and rep.written == 0 and rep.unchanged == 5  # 4 PRs, 1 push
    assert card1.read_text().endswith(note)

    rep = mine(b.path, root, RECIPE, since="HEAD~2")
    assert rep.mode == "since" and rep.commits == 2 and rep.written == 0
    with pytest.raises(MiningError, match="no such revision"):
        mine(b.path, root, RECIPE, since="not-a-rev")


def test_rewritten_history_is_remined_without_losing_notes(tmp_path):
    b = Builder(tmp_path / "repo")
    shas = _base_history(b)
    b.commit("Add scratch tool (#8)", {"tools/scratch.py": "def scratch():\n    pass\n"})
    root = tmp_path / "kb"
    mine(b.path, root, RECIPE)
    folder = root / "pr_archive" / "demo"
    for pr, note in (
        (2, "Root cause was an int32 index.\n"),
        (3, "Keep: benchmark numbers in the PR.\n"),
    ):
        p = folder / f"{pr}.md"
        p.write_text(p.read_text().split("## Notes")[0] + "## Notes\n\n" + note)

    # rewrite: drop #3 and #8, land #3 again differently, then a new #9
    b.repo.git.reset("-q", "--hard", shas["2"])
    b.commit("perf: fuse qk norm, second attempt (#3)", {"models/qwen3.py": QWEN_V2})
    b.commit("Bump docs (#9)", {"docs/x.md": "x\n"})
    rep = mine(b.path, root, RECIPE)
    assert rep.mode == "full" and "rewritten" in rep.reason
    assert rep.removed == ["8"] and rep.orphaned == []
    c3, text3 = _card(root, 3)
    assert (
        c3.sha == b.repo.head.commit.parents[0].hexsha
        and c3.title == "perf: fuse qk norm, second attempt"
    )
    assert [f.path for f in c3.files] == ["models/qwen3.py"]
    assert text3.endswith("## Notes\n\nKeep: benchmark numbers in the PR.\n")
    assert _card(root, 2)[1].endswith("## Notes\n\nRoot cause was an int32 index.\n")

    # a vanished PR whose card has Notes stays, and is reported
    p9 = folder / "9.md"
    p9.write_text(p9.read_text().split("## Notes")[0] + "## Notes\n\nWorth keeping.\n")
    b.repo.git.reset("-q", "--hard", "HEAD~1")
    rep = mine(b.path, root, RECIPE)
    assert rep.orphaned == ["9"] and p9.exists()


def test_duplicate_pr_numbers_share_one_card(tmp_path):
    b = Builder(tmp_path / "repo")
    first = b.commit(
        "Fix ray worker log file (#12)", {"engine/ray.py": "def worker():\n    pass\n"}
    )
    b.commit("unrelated (#13)", {"other.py": "x = 1\n"})
    second = b.commit(
        "Fix ray worker log file (#12)", {"engine/log.py": "def log_file():\n    pass\n"}
    )
    root = tmp_path / "kb"
    rep = mine(b.path, root, RECIPE)
    assert rep.prs == 2
    c12, text = _card(root, 12)
    assert c12.sha == second
    assert sorted(f.path for f in c12.files) == ["engine/log.py", "engine/ray.py"]
    assert first[:10] in text

    # the same PR number arriving in a later incremental run merges into the existing card
    third = b.commit(
        "Fix ray worker log file (#12)", {"engine/extra.py": "def extra():\n    pass\n"}
    )
    mine(b.path, root, RECIPE)
    c12, text = _card(root, 12)
    assert c12.sha == third and len(c12.files) == 3 and second[:10] in text
