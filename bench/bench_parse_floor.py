#!/usr/bin/env python3
"""A cold `kbase mine` against its floor: `git log -p` plus tree-sitter's own parse time
(issues #12 and #24; target: the mine within 1.3x of the floor, measured in the same run).

    python3 bench/bench_parse_floor.py --repo PATH [--name flashinfer]

Mines PATH from scratch in this process (a fresh root: no mining cache),
adding up the CPU time of every tree-sitter `Parser.parse` call by grammar and by whether it
started from the edited tree of another version (incremental) or from nothing (the first
version of a path met). Then runs `git log -p` over the same repository (the whole graph, as
the miner walks it), and a cold `kbase mine` through the CLI as a user runs it (a fresh root;
its naming workers parse on other cores, so its wall time can go under the floor). The parse
calls are the floor under any miner that parses each changed file before and after the change
with tree-sitter in one process: the rest of the mine (blob reads, the brace scanner, tree
walks, cards) only adds to git's stream and them. Writes
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

from common import REPO, children_cpu, mine_cmd, write_result
from rich.console import Console
from rich.table import Table

TARGET = 1.3  # cold mine wall <= TARGET x (git log -p wall + parse CPU)


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
    spec = REPO / "pr_archive" / "recipes" / f"{args.name}.yaml"
    recipe, _ = resolve_recipe(str(spec) if spec.exists() else None, args.name, root)
    # the parse calls are timed in this process: the naming workers (ingest/name_pool.py) stay off
    os.environ["KBASE_MINE_WORKERS"] = "1"
    t, c = time.perf_counter(), time.process_time()
    rep = mine(args.repo, root, recipe)
    mine_wall, mine_cpu = time.perf_counter() - t, time.process_time() - c
    del os.environ["KBASE_MINE_WORKERS"]
    t, c = time.perf_counter(), children_cpu()
    subprocess.run(["git", "-C", args.repo, "log", "-p"], stdout=subprocess.DEVNULL, check=True)
    git_wall, git_cpu = time.perf_counter() - t, children_cpu() - c
    cli_root = Path(tempfile.mkdtemp(prefix="kbase-floor-cli-"))
    (cli_root / "pr_archive").mkdir()
    t, c = time.perf_counter(), children_cpu()
    subprocess.run(mine_cmd(Path(args.repo), cli_root, args.name), check=True, capture_output=True)
    # CPU too (the mine's and its gits'): on a machine other work keeps busy, wall time measures
    # the load as much as the mine, CPU time the mine alone
    cli_wall, cli_cpu = time.perf_counter() - t, children_cpu() - c
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
        "git_log_p_wall_s": round(git_wall, 3),
        "git_log_p_cpu_s": round(git_cpu, 3),
        "parse_calls": rows,
        "parse_s": round(parse_s, 2),
        "floor_s": round(git_wall + parse_s, 2),
        "cli_mine_wall_s": round(cli_wall, 2),
        "cli_mine_vs_floor": round(cli_wall / (git_wall + parse_s), 2),
        "cli_mine_cpu_s": round(cli_cpu, 2),
        "cli_mine_cpu_vs_floor_cpu": round(cli_cpu / (git_cpu + parse_s), 2),
        "target_ratio": TARGET,
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
        f"git log -p: {git_wall:.2f} s wall, {git_cpu:.2f} s CPU; parse calls alone: "
        f"{parse_s:.2f} s CPU; floor (git + parse) {git_wall + parse_s:.2f} s. Cold `kbase mine`: "
        f"{cli_wall:.2f} s wall = {cli_wall / (git_wall + parse_s):.2f}x the floor (target "
        f"{TARGET}x); its CPU (with its gits') {cli_cpu:.2f} s = "
        f"{cli_cpu / (git_cpu + parse_s):.2f}x git's CPU + parse; the in-process mine "
        f"{mine_wall:.1f} s wall, {mine_cpu:.1f} s CPU"
    )
    print(f"wrote {write_result('parse_floor', res)}", file=sys.stderr)


if __name__ == "__main__":
    main()
