#!/usr/bin/env python3
"""`kbase index` end to end, two installs side by side in alternating runs (issue #24: a piece of
re-index machinery stays only if it is >= 1.3x faster on the machines users have).

    python bench/bench_index_ab.py --a /tmp/base/.venv/bin/kbase --b .venv/bin/kbase \\
        [--root R --home H] [--rounds 3] [--cases fresh,noop,edit]

Cases, each a fresh process per run, A then B, --rounds times:
- fresh: the first index of a copy of the shipped skills into an empty home;
- noop: `kbase index` again on a copy of R and H (nothing changed);
- edit: one SKILL.md of the copy edited, then `kbase index`.
R and H (a dev-set root and its index home, e.g. bench/devset_kb.py's) are copied once per
install, so neither install writes the originals nor sees the other's files.
Prints the median wall seconds of each case and install, and B's speed-up over A.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(kbase: str, root: Path, home: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KBASE_")}
    env.update(KBASE_HOME=str(home), KBASE_ROOT=str(root))
    t = time.perf_counter()
    r = subprocess.run([kbase, "index", "--json"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{kbase} index failed:\n{r.stderr[-2000:]}")
    return wall


def _edit(root: Path, k: int) -> None:
    md = sorted((root / "skills").iterdir())[k % 50] / "SKILL.md"
    md.write_text(md.read_text(encoding="utf-8") + f"\nOne more line, edit {k}.\n", "utf-8")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="the kbase executable of install A (baseline)")
    ap.add_argument("--b", required=True, help="the kbase executable of install B")
    ap.add_argument("--root", type=Path, help="a root for the noop and edit cases")
    ap.add_argument("--home", type=Path, help="its index home")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", default="fresh,noop,edit")
    args = ap.parse_args()
    cases = args.cases.split(",")
    work = Path(tempfile.mkdtemp(prefix="kbase-index-ab-"))
    skills = work / "skills-root"
    shutil.copytree(REPO / "skills", skills / "skills")
    (skills / "pr_archive").mkdir()
    copies = {}
    if {"noop", "edit"} & set(cases):
        if not (args.root and args.home):
            raise SystemExit("--root and --home are needed for the noop and edit cases")
        for name, exe in (("A", args.a), ("B", args.b)):
            root, home = work / f"root-{name}", work / f"home-{name}"
            shutil.copytree(args.root, root, symlinks=True)
            shutil.copytree(args.home, home, symlinks=True)
            _run(exe, root, home)  # catch up: the copies have new paths and inodes
            copies[name] = (root, home)
    walls: dict[tuple[str, str], list[float]] = {}
    for k in range(args.rounds):
        for case in cases:
            for name, exe in (("A", args.a), ("B", args.b)):
                if case == "fresh":
                    home = work / f"fresh-{name}-{k}"
                    wall = _run(exe, skills, home)
                    shutil.rmtree(home)
                else:
                    root, home = copies[name]
                    if case == "edit":
                        _edit(root, k)
                    wall = _run(exe, root, home)
                walls.setdefault((case, name), []).append(wall)
    for case in cases:
        a = statistics.median(walls[(case, "A")])
        b = statistics.median(walls[(case, "B")])
        pairs = zip(walls[(case, "A")], walls[(case, "B")], strict=True)
        runs = " ".join(f"{x:.2f}/{y:.2f}" for x, y in pairs)
        print(f"{case:6s} A {a:6.2f} s  B {b:6.2f} s  A/B {a / b:5.2f}x  (A/B runs: {runs})")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
