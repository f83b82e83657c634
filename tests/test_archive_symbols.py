"""Symbols from parsed code: each fixture under tests/fixtures/mining/ is a file and a change to it
(a patch; or a new or deleted file) with the hand-written definitions that enclose every changed
line (tests/mining_fixtures.py). Mining a real repository built from it must name exactly those."""

from __future__ import annotations

from pathlib import Path

import mining_fixtures
import pytest

git = pytest.importorskip("git")

from kbase.ingest.brace_scan import scan_defs  # noqa: E402
from kbase.ingest.card_format import split_card  # noqa: E402
from kbase.ingest.mining import mine  # noqa: E402

from kbase.schema import PRCard, Recipe  # noqa: E402

RECIPE = Recipe(name="fix", upstream="https://github.com/example/fix", families={})


def _mine_case(case: str, tmp: Path) -> tuple[dict, PRCard]:
    truth = mining_fixtures.truth(case)
    before = mining_fixtures.before(case)
    repo = git.Repo.init(tmp / "repo", initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "T").set_value("user", "email", "t@example.invalid")
    target = tmp / "repo" / truth["path"]
    target.parent.mkdir(parents=True, exist_ok=True)
    (tmp / "repo" / "README.md").write_text("fixture\n")
    repo.git.add("README.md")
    if before is not None:
        target.write_bytes(before)
        repo.git.add(truth["path"])
    repo.git.commit("-q", "-m", "base (#1)")
    mining_fixtures.apply_change(case, tmp / "repo")
    repo.git.add("-A")
    repo.git.commit("-q", "-m", "the change (#2)")
    mine(tmp / "repo", tmp / "kb", RECIPE)
    text = (tmp / "kb" / "pr_archive" / "fix" / "2.md").read_text()
    return truth, PRCard.model_validate(split_card(text).meta)


@pytest.mark.parametrize("case", mining_fixtures.CASES)
def test_symbols_are_the_enclosing_definitions(case, tmp_path):
    truth, card = _mine_case(case, tmp_path)
    (f,) = [x for x in card.files if x.path == truth["path"]]
    assert sorted(f.symbols) == sorted(truth["symbols"])
    assert sorted(f.kernels) == sorted(truth.get("kernels") or [])
    assert len(f.named_by) == len(f.symbols)
    assert set(f.named_by) <= {"tree-sitter", "scanner"}
    # no cap drops a kernel, and kernels rank first on the card
    kernels = truth.get("kernels") or []
    assert card.touched[: len(kernels)] == [s for s in card.touched if s in kernels]


def test_braces_split_by_preprocessor_are_read_by_the_scanner(tmp_path):
    truth, card = _mine_case("preproc_braces", tmp_path)
    (f,) = card.files
    by = dict(zip(f.symbols, f.named_by, strict=True))
    assert by["load_or_zero"] == "scanner"
    long_kernel = next(s for s in f.kernels if len(s) > 60)
    assert long_kernel in card.touched[:1]


def test_scanner_reads_signatures_before_the_body():
    src = b"""
namespace a {
template <int N>
__global__ void __launch_bounds__(N * 32)
    K(float* x)
    EXTRA_MACRO(N > 0) {
  if (x) { x[0] = 1; }
}
struct S {
  S(int v) : v_(v), w_{v} {}
  int get() const { return v_; }
  int v_, w_;
};
int S2::put(int y) { return y; }
template <int M> __device__ void g(int z) {
  if constexpr (M > 1) { z++; }
  auto h = [&](int y) { return y; };
}
}
"""
    d = scan_defs(src)
    names = {(s.name, s.kind) for s in d.spans}
    assert ("K", "kernel") in names
    assert {("S::S", "method"), ("S::get", "method"), ("S2::put", "method")} <= names
    assert d.owner(7).name == "K"
    # control statements and lambdas inside a body are no definitions
    assert not names & {("constexpr", "function"), ("h", "function")} and d.owner(18).name == "g"


_CONFLICTED = """def scale(x, factor=2):
<<<<<<< HEAD
    return x * factor
=======
    return factor * x
>>>>>>> tuning


def configs():
    return [dict(block=64, warps=4), dict(block=128, warps=8)]


class Loader:
    def load(self, path):
        with open(path) as fh:
            return fh.read()
"""


def test_python_tree_sitter_cannot_parse_still_names_what_it_found(tmp_path):
    """A committed merge conflict is no Python: its marker lines are ERROR nodes, and they
    end `scale` early. The card still comes, with the definitions tree-sitter recognised
    around them (no scanner guesses the conflicted lines' owner)."""
    repo = git.Repo.init(tmp_path / "repo", initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "T").set_value("user", "email", "t@example.invalid")
    src = tmp_path / "repo" / "tune.py"
    src.write_text(_CONFLICTED)
    repo.git.add("tune.py")
    repo.git.commit("-q", "-m", "base (#1)")
    changed = _CONFLICTED.replace("factor * x", "x * factor  # either").replace("64", "32")
    src.write_text(changed.replace("fh.read()", "fh.read().strip()"))
    repo.git.commit("-q", "-am", "the change (#2)")
    mine(tmp_path / "repo", tmp_path / "kb", RECIPE)
    text = (tmp_path / "kb" / "pr_archive" / "fix" / "2.md").read_text()
    (f,) = PRCard.model_validate(split_card(text).meta).files
    assert (f.added, f.deleted) == (3, 3)
    assert sorted(f.symbols) == ["Loader.load", "configs"]
    assert f.named_by == ["tree-sitter", "tree-sitter"]


def test_a_missing_blob_is_a_warning_not_a_traceback(tmp_path):
    truth, _ = _mine_case("python_methods", tmp_path)
    repo = git.Repo(tmp_path / "repo")
    blob = repo.git.rev_parse(f"HEAD:{truth['path']}")
    obj = tmp_path / "repo" / ".git" / "objects" / blob[:2] / blob[2:]
    obj.chmod(0o644)
    obj.unlink()
    rep = mine(tmp_path / "repo", tmp_path / "kb2", RECIPE)
    assert rep.prs == 2
    assert any(blob[:12] in w and truth["path"] in w for w in rep.warnings)


def test_the_parse_budget_counts_parser_work_not_seconds(monkeypatch):
    """A parse whose error recovery runs away is abandoned (the scanner takes over), and the same
    source is abandoned on a busy machine as on a quiet one: the budget counts tree-sitter's
    progress callbacks, so a slow clock cannot change which method names a symbol."""
    import time

    from kbase.ingest import definitions as D

    sound = b"__global__ void k(float* x) { x[threadIdx.x] = 0.f; }\n" * 40
    runaway = b"(T<A<B<C(" * 4000  # error recovery: ~53 callbacks per KB, 36 KB
    assert D.parse_tree("cuda", sound)[0] is not None
    assert D.parse_tree("cuda", runaway)[0] is None
    # a clock that says every call took a second changes nothing
    ticks = iter(range(10**9))
    monkeypatch.setattr(time, "thread_time", lambda: float(next(ticks)))
    monkeypatch.setattr(time, "perf_counter", lambda: float(next(ticks)))
    assert D.parse_tree("cuda", sound)[0] is not None
    assert D.parse_tree("cuda", runaway)[0] is None
    # and it is the budget that decides
    monkeypatch.setattr(D, "PARSE_BUDGET_CALLS", 10**6)
    assert D.parse_tree("cuda", runaway)[0] is not None


def test_dense_sound_python_is_parsed_within_the_budget():
    """Python with an operator every few characters costs tree-sitter ~21 progress callbacks
    per KB (real test files reach 20): such a file is sound, and no scanner would name its
    definitions if its parse were abandoned."""
    from kbase.ingest import definitions as D

    line = b"    assert rs_series(x**2 + 3*x*y - y**3, x, 5) == x**2 + 3*x*y - y**3\n"
    src = b"def test_series():\n" + line * 1000 + b"\n\ndef test_other():\n    pass\n"
    defs, tree = D.parse_tree("py", src)
    assert tree is not None and not tree.root_node.has_error
    assert [s.name for s in defs.spans] == ["test_series", "test_other"]


def test_line_offsets_start_every_line_and_end_the_text():
    from array import array

    from kbase.ingest import definitions as d

    assert d.line_offsets(b"a\nbb\n\nccc") == array("q", [0, 2, 5, 6, 9])
    assert d.line_offsets(b"a\nbb\n") == array("q", [0, 2, 5])
