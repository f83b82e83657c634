#!/usr/bin/env python3
"""Where an incremental `kbase mine` spends its time (issue #12: 10 new commits in <= 1 s wall).

For each replay of the shared histories: a bare clone with HEAD moved back `--back` first-parent
commits is mined through the CLI, HEAD goes back to the tip, and the incremental mine runs in a
fresh process (this script again, `--child`) with timers on its phases: imports, the recipe,
each git call, blob reads, tree-sitter and scanner parses, cards, the definitions cache, the
state. Wall and CPU (the process's own, and that of the git processes it waited for) per
phase; what the interpreter's start and exit cost is the parent's measure of the whole child
less the child's own. Rows are nested (indented): a parent's `other` is what its listed
children do not cover. Each round mines a fresh copy of the pre-mined root; the round with the
least CPU is kept (`--repeats`).

    python3 bench/bench_mine_phases.py [--only NAME] [--repeats 3] [--back 10]

Writes bench/results/bench_mine_phases.json and prints a table per repository.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "bench"))
from common import HISTORIES, SHARED, children_cpu, mine_cmd  # noqa: E402

RESULTS = REPO_ROOT / "bench" / "results" / "bench_mine_phases.json"

# (module, attribute, label, depth): functions timed in the child; depth nests the table rows
TIMED = (
    ("kbase.ingest.recipes", "load_recipe_file", "recipe load (file, twin or YAML, validation)", 1),
    ("kbase.ingest.mining", "open_repo", "git rev-parse (open_repo)", 1),
    ("kbase.ingest.mining", "origin_url", "git config (origin_url)", 1),
    ("kbase.ingest.mining", "_is_ancestor", "git merge-base", 1),
    ("kbase.ingest.graph", "read_plan", "git rev-list (read_plan)", 1),
    ("kbase.ingest.defs_cache", "open_cache", "definitions cache open", 1),
    ("kbase.ingest.logrun", "stream_history", "stream_history (git log -p, names, cards)", 1),
    ("kbase.ingest.blobs", "BlobReader.read_many", "blob reads (git cat-file)", 2),
    ("kbase.ingest.blobs", "BlobReader.read", "blob reads, one at a time", 2),
    ("kbase.ingest.change_symbols", "parse_tree", "tree-sitter parses", 2),
    ("kbase.ingest.change_symbols", "scan_defs", "brace scanner parses", 2),
    ("kbase.ingest.change_symbols", "py_scan_defs", "indentation scanner parses", 2),
    ("kbase.ingest.card_writer", "CardWriter.__call__", "cards: build and write", 2),
    ("kbase.ingest.card_writer", "CardWriter.link_reverts", "revert links", 1),
    ("kbase.ingest.defs_cache", "DefsCache.close", "definitions cache flush and close", 1),
    ("kbase.ingest.checkpoint", "atomic_write", "state write", 1),
)


def _now() -> tuple[float, float, float]:
    return time.perf_counter(), time.process_time(), children_cpu()


def child(argv: list[str]) -> None:
    """Run `kbase mine ARGV` here with timers; print the phases as JSON on stdout's last line."""
    t0 = _now()
    rows: list[dict] = []

    def lap(label: str, since: tuple[float, float, float]) -> tuple[float, float, float]:
        now = _now()
        rows.append(_row(label, 0, 1, since, now))
        return now

    import kbase.mine_cli

    t = lap("import kbase.mine_cli (no-op check)", t0)
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")  # as mine_cli._mine does
    import kbase.api  # noqa: F401

    t = lap("import kbase.api (pydantic, kbase.schema)", t)
    for mod in ("card_writer", "checkpoint", "defs_cache", "graph", "logrun", "mining"):
        importlib.import_module(f"kbase.ingest.{mod}")
    t = lap("import the miner (card writer, log parser, tree-sitter)", t)
    acc: dict[str, list[float]] = {}
    for mod, attr, label, _ in TIMED:
        _wrap(mod, attr, label, acc)
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        kbase.mine_cli.run(argv)
    report = json.loads(out.getvalue().splitlines()[-1])
    end = lap("mine (kbase.mine_cli.run)", t)
    for _mod, _attr, label, depth in TIMED:
        got = acc.get(label)
        if got:
            rows.append({"phase": label, "depth": depth, "calls": int(got[0]), "wall": got[1],
                         "cpu": got[2], "git_cpu": got[3]})  # fmt: skip
    total = _row("in process", 0, 1, t0, end)
    print(json.dumps({"rows": rows, "total": total, "report": report}), flush=True)
    sys.stderr.flush()
    os._exit(0)  # as kbase.cli.entry ends a finished mine: no interpreter teardown


def _row(label: str, depth: int, calls: int, a: tuple, b: tuple) -> dict:
    return {"phase": label, "depth": depth, "calls": calls, "wall": b[0] - a[0],
            "cpu": b[1] - a[1], "git_cpu": b[2] - a[2]}  # fmt: skip


def _wrap(modname: str, attr: str, label: str, acc: dict[str, list[float]]) -> None:
    owner = importlib.import_module(modname)
    *path, name = attr.split(".")
    for part in path:
        owner = getattr(owner, part)
    fn = getattr(owner, name)

    def timed(*args, **kwargs):
        a = _now()
        try:
            return fn(*args, **kwargs)
        finally:
            b = _now()
            got = acc.setdefault(label, [0, 0.0, 0.0, 0.0])
            got[0] += 1
            for i in range(3):
                got[i + 1] += b[i] - a[i]

    setattr(owner, name, timed)


def git(git_dir: Path, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def measure(name: str, work: Path, repeats: int, back: int) -> dict:
    replay = work / f"{name}-replay"
    if not replay.exists():
        data = SHARED / "data" / "histories" / f"{name}.jsonl"
        tool = SHARED / "tools" / "replay_history.py"
        subprocess.run([sys.executable, str(tool), str(data), str(replay)], check=True)
    clone = work / f"{name}-incr.git"
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(
        ["git", "clone", "-q", "--bare", "--shared", str(replay), str(clone)],
        check=True,
        capture_output=True,
    )
    tip = git(clone, "rev-parse", "HEAD")
    git(clone, "update-ref", "HEAD", git(clone, "rev-parse", f"HEAD~{back}"))
    base = work / f"{name}-base"
    shutil.rmtree(base, ignore_errors=True)
    (base / "pr_archive").mkdir(parents=True)
    subprocess.run(mine_cmd(clone, base, name), check=True, capture_output=True)
    git(clone, "update-ref", "HEAD", tip)
    argv = mine_cmd(clone, work / f"{name}-run", name)[4:]  # the options after `kbase mine`
    best = None
    for _ in range(repeats):
        root = work / f"{name}-run"
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(base, root, symlinks=True)
        c0, t0 = children_cpu(), time.perf_counter()
        proc = subprocess.run(
            [sys.executable, __file__, "--child", *argv], capture_output=True, text=True
        )
        wall, cpu = time.perf_counter() - t0, children_cpu() - c0
        if proc.returncode != 0:
            raise SystemExit(f"{name}: the timed mine failed: {proc.stderr[-2000:]}")
        got = json.loads(proc.stdout.splitlines()[-1])
        assert got["report"]["mode"] == "incremental", got["report"]["mode"]
        inner = got["total"]
        start = {"phase": "interpreter start and exit", "depth": 0, "calls": 1,
                 "wall": wall - inner["wall"], "cpu": cpu - inner["cpu"] - inner["git_cpu"],
                 "git_cpu": 0.0}  # fmt: skip
        run = {"wall": wall, "cpu": cpu, "rows": [start, *got["rows"]], "report": got["report"]}
        if best is None or run["cpu"] < best["cpu"]:
            best = run
    assert best is not None
    return {"repo": name, "commits": best["report"]["commits"], **best,
            "load_1min": os.getloadavg()[0]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--only", action="append", default=None, help="history (repeatable)")
    ap.add_argument("--repeats", type=int, default=3, help="rounds; the least CPU is kept")
    ap.add_argument("--back", type=int, default=10, help="new commits for the incremental mine")
    ap.add_argument("--keep", type=Path, default=None, help="work folder to keep and reuse")
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table

    work = args.keep or Path(tempfile.mkdtemp(prefix="kbase-bench-mine-phases-"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for name in args.only or HISTORIES:
            results.append(measure(name, work, args.repeats, args.back))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    console = Console(width=160)
    for r in results:
        table = Table(
            title=f"{r['repo']}: incremental mine of {r['commits']} commits, "
            f"wall {r['wall']:.3f} s, CPU {r['cpu']:.3f} s (load {r['load_1min']:.1f})",
            title_justify="left",
        )
        for col in ("phase", "calls", "wall s", "CPU s", "git CPU s"):
            table.add_column(col, justify="left" if col == "phase" else "right")
        for row in r["rows"]:
            table.add_row(
                "  " * row["depth"] + row["phase"],
                str(row["calls"]),
                f"{row['wall']:.3f}",
                f"{row['cpu']:.3f}",
                f"{row['git_cpu']:.3f}",
            )
        console.print(table)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    out = {"at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "repeats": args.repeats,
           "back": args.back, "cpus": os.cpu_count(), "results": results}  # fmt: skip
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")
    Console(stderr=True).print(f"wrote {RESULTS.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.argv = [sys.argv[0], "mine", *sys.argv[2:]]
        child(sys.argv[2:])
    else:
        main()
