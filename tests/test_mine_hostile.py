"""Issue #28, mining: an archive name cannot leave pr_archive/, and a recipe is read bounded."""

from __future__ import annotations

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
    for name in ("../..", "..", "../other", "Demo", "a/b"):
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
