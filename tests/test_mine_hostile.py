"""Issue #28, mining: an archive name cannot leave pr_archive/, and a recipe is read bounded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from test_mine_cli import RECIPE, setup  # noqa: F401  (pytest fixture)


def kbase(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kbase.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def test_a_name_outside_pr_archive_is_refused_and_writes_nothing(setup, tmp_path):  # noqa: F811
    repo, root = setup
    victim = root / "pr_archive" / "other" / "1.md"  # a card --full must never delete
    victim.parent.mkdir(parents=True)
    victim.write_text("an unrelated card\n")
    before = _files(tmp_path)
    recipe = root / "pr_archive" / "recipes" / "demo.yaml"
    for name in ("../..", "../other"):
        for extra in ([], ["--recipe", str(recipe)], ["--full", "--recipe", str(recipe)]):
            out = kbase("mine", "--repo", str(repo), "--name", name, "--root", str(root), *extra)
            assert out.returncode != 0, (name, extra, out.stdout)
            assert "kebab-case" in out.stdout + out.stderr and "Traceback" not in out.stderr
    assert _files(tmp_path) == before and victim.read_text() == "an unrelated card\n"
    out = kbase(
        "recipe",
        "suggest",
        "--repo",
        str(repo),
        "--name",
        "../../x",
        "--write",
        "--root",
        str(root),
    )
    assert out.returncode != 0 and _files(tmp_path) == before


def test_a_recipe_that_never_ends_is_refused_at_once(setup, tmp_path):  # noqa: F811
    repo, root = setup
    fifo = tmp_path / "recipe.fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.yaml"
    big.write_text(RECIPE + "#" * (2 << 20) + "\n")
    for spec in ("/dev/zero", str(fifo), str(big)):
        t0 = time.monotonic()
        out = kbase("mine", "--repo", str(repo), "--name", "demo", "--root", str(root),
                    "--recipe", spec, timeout=30)  # fmt: skip
        assert out.returncode != 0 and time.monotonic() - t0 < 20, spec
        assert "regular file" in out.stdout + out.stderr or "larger than" in out.stdout + out.stderr


def test_a_path_that_is_not_utf8_is_mined_and_shown_escaped(tmp_path):
    from kbase.ingest.card_format import split_card

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@e"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (repo / "ok.cu").write_text("__global__ void ok() {}\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "add ok (#1)"], check=True)
    with open(os.path.join(os.fsencode(repo), b"bad\xff.cu"), "wb") as fh:
        fh.write(b"__global__ void bad() {}\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "add bad (#2)"], check=True)
    root = tmp_path / "kb"
    (root / "pr_archive").mkdir(parents=True)
    out = kbase("mine", "--repo", str(repo), "--name", "demo", "--root", str(root))
    assert out.returncode == 0, out.stdout + out.stderr
    card = (root / "pr_archive" / "demo" / "2.md").read_text(encoding="utf-8")
    assert split_card(card).meta["files"][0]["path"] == "bad\\xff.cu"
    assert "`bad\\xff.cu`" in card


def _corrupt(path: Path) -> None:
    """Flip bytes inside a loose object's zlib stream (what a bad disk or a torn copy leaves)."""
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_corrupt_blob_is_called_unreadable_not_binary(tmp_path):
    """A blob git cannot inflate gives a warning naming the file, and its card says
    `unreadable` (front-matter, totals, summary, Files); the other files keep their counts."""
    repo = tmp_path / "repo"

    def git(*args: str) -> str:
        run = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@e", *args]
        return subprocess.run(run, check=True, capture_output=True, text=True).stdout.strip()

    repo.mkdir()
    git("init", "-q", "-b", "main")
    for n in (1, 2):
        (repo / "a.py").write_text(f"def f():\n    return {n}\n")
        (repo / "b.py").write_text(f"x = {n}\n")
        git("add", ".")
        git("commit", "-qm", f"change {n} (#{n})")
    blob = git("rev-parse", "HEAD:a.py")
    _corrupt(repo / ".git" / "objects" / blob[:2] / blob[2:])
    assert subprocess.run(["git", "-C", str(repo), "cat-file", "-p", blob]).returncode != 0
    root = tmp_path / "kb"
    (root / "pr_archive").mkdir(parents=True)
    r = kbase("mine", "--repo", str(repo), "--name", "demo", "--root", str(root), "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert any("a.py" in w and "could not read" in w for w in report["warnings"])
    text = (root / "pr_archive" / "demo" / "2.md").read_text()
    assert (
        "- path: a.py\n  added: null\n  deleted: null\n  symbols: []\n  unreadable: true\n" in text
    )
    assert "totals: {files: 2, added: 1, deleted: 1, unreadable: 1}" in text
    assert "(+1/-1 lines, 1 unreadable)" in text and "binary" not in text
    assert "- `a.py` (unreadable)" in text and "- `b.py` (+1/-1)" in text
    assert "```diff\n--- b.py\n@@ +1\n-x = 1\n+x = 2\n```" in text  # the readable file's hunk
    # the card loads (index, lint) with the flag
    card = kbase("list", "--root", str(root), "--json")
    assert card.returncode == 0, card.stderr
