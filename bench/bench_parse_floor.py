#!/usr/bin/env python3
"""What tree-sitter alone costs in a cold mine, against `git log --first-parent -p` (issue #12).

    python3 bench/bench_parse_floor.py --repo PATH [--name flashinfer]

Mines PATH from scratch in this process (no parse worker, a fresh root: no definitions cache),
adding up the CPU time of every tree-sitter `Parser.parse` call by grammar and by whether it
started from the edited tree of another version (incremental) or from nothing (the first
version of a path met). Then runs `git log --first-parent -p` over the same repository, in the
same run. The parse calls are the floor under any miner that parses each changed file before
and after the change with tree-sitter, as #12 asks: the rest of the mine (git's stream, blob
reads, the brace scanner, tree walks, cards) only adds to it. Writes
bench/results/parse_floor.json.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, children_cpu, write_result
from rich.console import Console
from rich.table import Table

os.environ["KBASE_MINE_WORKER"] = "0"  # every parse in this process, where it can be timed


class _TimedParser:
    """A tree-sitter Parser whose `parse` calls add their CPU time to `spent` (the thread's: a
    parse runs in C on the calling thread, and CPU time holds on a busy machine where wall
    time does not)."""

    spent: dict[tuple[str, bool], list[float]] = {}

    def __init__(self, make, lang: str) -> None:
        self._p = make(lang)
        self._lang = lang

    def parse(self, *args, **kw):
        t = time.thread_time()
        try:
            return self._p.parse(*args, **kw)
        finally:
            row = self.spent.setdefault((self._lang, len(args) > 1), [0, 0.0])
            row[0] += 1
            row[1] += time.thread_time() - t

    def reset(self) -> None:
        self._p.reset()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repo", required=True, help="a clone (bare or not), read only")
    ap.add_argument("--name", default="flashinfer", help="archive (and recipe) name")
    args = ap.parse_args()
    from kbase.ingest import definitions as D
    from kbase.ingest.mining import mine
    from kbase.ingest.recipes import resolve_recipe

    make = D._parser
    D._parser = lambda lang: _TimedParser(make, lang)  # type: ignore[assignment]
    root = Path(tempfile.mkdtemp(prefix="kbase-floor-"))
    (root / "pr_archive").mkdir()
    recipe, _ = resolve_recipe(
        str(REPO / "pr_archive" / "recipes" / f"{args.name}.yaml"), args.name, root
    )
    t, c = time.perf_counter(), time.process_time()
    rep = mine(args.repo, root, recipe)
    mine_wall, mine_cpu = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), children_cpu()
    subprocess.run(
        ["git", "-C", args.repo, "log", "--first-parent", "-p"],
        stdout=subprocess.DEVNULL,
        check=True,
    )
    git_wall, git_cpu = time.perf_counter() - t, children_cpu() - c
    rows = {
        f"{lang} {'incremental' if inc else 'from scratch'}": {"calls": n, "s": round(s, 3)}
        for (lang, inc), (n, s) in sorted(_TimedParser.spent.items())
    }
    parse_s = sum(r["s"] for r in rows.values())
    res = {
        "repo": args.repo,
        "commits": rep.commits,
        "cards_written": rep.written,
        "blobs_parsed": rep.blobs_parsed,
        "blobs_incremental": rep.blobs_incremental,
        "mine_wall_s": round(mine_wall, 2),
        "mine_process_cpu_s": round(mine_cpu, 2),
        "git_log_first_parent_p_wall_s": round(git_wall, 3),
        "git_log_first_parent_p_cpu_s": round(git_cpu, 3),
        "parse_calls": rows,
        "parse_s": round(parse_s, 2),
        "parse_cpu_vs_git_cpu": round(parse_s / git_cpu, 2),
        "target_ratio": 1.5,
    }
    table = Table(
        title=f"tree-sitter parse calls in a cold mine of {args.name}", title_justify="left"
    )
    for col in ("parse calls", "calls", "CPU s"):
        table.add_column(col)
    for k, r in rows.items():
        table.add_row(k, str(r["calls"]), f"{r['s']:.2f}")
    table.add_row("all", str(sum(r["calls"] for r in rows.values())), f"{parse_s:.2f}")
    console = Console(width=120)
    console.print(table)
    console.print(
        f"git log --first-parent -p: {git_wall:.2f} s wall, {git_cpu:.2f} s CPU; parse calls "
        f"alone: {parse_s:.2f} s CPU = {parse_s / git_cpu:.2f}x git's CPU (target for the "
        f"whole mine: 1.5x); whole mine {mine_wall:.1f} s wall, {mine_cpu:.1f} s CPU in this "
        "process"
    )
    print(f"wrote {write_result('parse_floor', res)}", file=sys.stderr)


if __name__ == "__main__":
    main()
