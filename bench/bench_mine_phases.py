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

    python3 bench/bench_mine_phases.py [--only NAME] [--repeats 3] [--back 10] [--against PY]

--against PY times the same mine with another interpreter's kbase too (e.g. `python3`, whose
editable install is main's checkout), round by round in turn so that both see the same machine
load; each interpreter mines its own pre-mined root (the card cache is keyed by the code that
builds cards, so one root shared by two checkouts would miss for both). Medians of all rounds
are printed beside the best round's phases.

Writes bench/results/bench_mine_phases.json and prints a table per repository (and interpreter).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "bench"))
from common import HISTORIES, SHARED, children_cpu, interpreter, mine_cmd  # noqa: E402

RESULTS = REPO_ROOT / "bench" / "results" / "bench_mine_phases.json"

# (module, attribute, label, depth): functions timed in the child; depth nests the table rows
TIMED = (
    ("kbase.ingest.recipes", "load_recipe_file", "recipe load (file, YAML, validation)", 1),
    ("kbase.ingest.mining", "open_repo", "git rev-parse (open_repo)", 1),
    ("kbase.ingest.mine_state", "origin_url", "git config (origin_url)", 1),
    ("kbase.ingest.mine_state", "GitRepo.ok", "git merge-base", 1),
    ("kbase.ingest.mining", "read_plan", "git rev-list (read_plan)", 1),
    ("kbase.ingest.mine_cache", "open_cache", "mining cache open", 1),
    ("kbase.ingest.logrun", "stream_history", "stream_history (git log -p, names, cards)", 1),
    ("kbase.ingest.logrun", "BlobReader.read", "blob reads (git cat-file)", 2),
    ("kbase.ingest.change_symbols", "parse_tree", "tree-sitter parses", 2),
    ("kbase.ingest.change_symbols", "scan_defs", "brace scanner parses", 2),
    ("kbase.ingest.card_writer", "CardWriter.__call__", "cards: build", 2),
    ("kbase.ingest.card_writer", "CardWriter.finish", "revert links and card writes", 1),
    ("kbase.ingest.mine_cache", "MineCache.close", "mining cache flush and close", 1),
    ("kbase.ingest.mine_state", "atomic_write", "state write", 1),
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

    import kbase.cli
    import kbase.mine_cli

    t = lap("import kbase.mine_cli (no-op check)", t0)
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")  # as mine_cli._mine does
    import kbase.api

    t = lap("import kbase.api (the façade)", t)
    for mod in ("card_writer", "mine_cache", "logrun", "mining"):
        importlib.import_module(f"kbase.ingest.{mod}")
    t = lap("import the miner (pydantic, card models, log parser, tree-sitter)", t)
    acc: dict[str, list[float]] = {}
    for mod, attr, label, _ in TIMED:
        _wrap(mod, attr, label, acc)
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        sys.argv = ["kbase", "mine", *argv]
        kbase.cli.main()  # the no-op path answers in mine_cli; a real mine goes on to typer's
    report = json.loads(out.getvalue().splitlines()[-1])
    end = lap("mine (kbase.cli.main)", t)
    for _mod, _attr, label, depth in TIMED:
        got = acc.get(label)
        if got:
            rows.append({"phase": label, "depth": depth, "calls": int(got[0]), "wall": got[1],
                         "cpu": got[2], "git_cpu": got[3]})  # fmt: skip
    total = _row("in process", 0, 1, t0, end)
    got = {"rows": rows, "total": total, "report": report, "kbase": kbase.api.__file__}
    print(json.dumps(got), flush=True)
    sys.stderr.flush()
    os._exit(0)  # no interpreter teardown in the figures


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


def measure(name: str, work: Path, repeats: int, back: int, pys: dict[str, str]) -> list[dict]:
    """One result per interpreter in `pys` (label -> executable), its rounds run in turn."""
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
    for label, py in pys.items():  # also fills each interpreter's bytecode cache
        base = work / f"{name}-base-{label}"
        shutil.rmtree(base, ignore_errors=True)
        (base / "pr_archive").mkdir(parents=True)
        cmd = mine_cmd(clone, base, name, python=py)
        subprocess.run(cmd, check=True, capture_output=True, env=_env(work))
    git(clone, "update-ref", "HEAD", tip)
    runs: dict[str, list[dict]] = {label: [] for label in pys}
    for _ in range(repeats):
        for label, py in pys.items():
            runs[label].append(_round(name, work, clone, label, py))
    out = []
    for label, rs in runs.items():
        best = min(rs, key=lambda r: r["cpu"])
        out.append({"repo": name, "interpreter": label, "python": pys[label],
                    "kbase": best["kbase"], "commits": best["report"]["commits"], **best,
                    "median_wall": statistics.median(r["wall"] for r in rs),
                    "median_cpu": statistics.median(r["cpu"] for r in rs),
                    "median_imports_cpu": statistics.median(r["imports_cpu"] for r in rs),
                    "rounds": [{"wall": r["wall"], "cpu": r["cpu"]} for r in rs],
                    "load_1min": os.getloadavg()[0]})  # fmt: skip
    return out


def _round(name: str, work: Path, clone: Path, label: str, py: str) -> dict:
    """One incremental mine by `py`, timed, on a fresh copy of its pre-mined root."""
    root = work / f"{name}-run-{label}"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(work / f"{name}-base-{label}", root, symlinks=True)
    argv = mine_cmd(clone, root, name)[4:]  # the options after `kbase mine`
    c0, t0 = children_cpu(), time.perf_counter()
    proc = subprocess.run(
        [py, __file__, "--child", *argv], capture_output=True, text=True, env=_env(work)
    )
    wall, cpu = time.perf_counter() - t0, children_cpu() - c0
    if proc.returncode != 0:
        raise SystemExit(f"{name} ({label}): the timed mine failed: {proc.stderr[-2000:]}")
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got["report"]["mode"] == "incremental", got["report"]["mode"]
    inner = got["total"]
    start = {"phase": "interpreter start and exit", "depth": 0, "calls": 1,
             "wall": wall - inner["wall"], "cpu": cpu - inner["cpu"] - inner["git_cpu"],
             "git_cpu": 0.0}  # fmt: skip
    imports = sum(r["cpu"] for r in got["rows"] if r["phase"].startswith("import "))
    return {"wall": wall, "cpu": cpu, "rows": [start, *got["rows"]], "report": got["report"],
            "kbase": got["kbase"], "imports_cpu": imports}  # fmt: skip


def _env(work: Path) -> dict[str, str]:
    """Bytecode cached under the work folder (as an installed package has it beside its code),
    not written into the checkouts themselves."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(work / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--only", action="append", default=None, help="history (repeatable)")
    ap.add_argument("--repeats", type=int, default=3, help="rounds; the least CPU is kept")
    ap.add_argument("--back", type=int, default=10, help="new commits for the incremental mine")
    ap.add_argument("--keep", type=Path, default=None, help="work folder to keep and reuse")
    ap.add_argument("--against", default=None, help="another interpreter, run in turn with this")
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table

    work = args.keep or Path(tempfile.mkdtemp(prefix="kbase-bench-mine-phases-"))
    work.mkdir(parents=True, exist_ok=True)
    pys = {"this": sys.executable}
    if args.against:
        pys["against"] = interpreter(args.against)
    results = []
    try:
        for name in args.only or HISTORIES:
            results.extend(measure(name, work, args.repeats, args.back, pys))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    console = Console(width=160)
    for r in results:
        who = f" ({r['interpreter']}: {r['kbase']})" if args.against else ""
        table = Table(
            title=f"{r['repo']}{who}: incremental mine of {r['commits']} commits, "
            f"wall {r['wall']:.3f} s, CPU {r['cpu']:.3f} s (load {r['load_1min']:.1f}); "
            f"median of {args.repeats}: wall {r['median_wall']:.3f} s, CPU {r['median_cpu']:.3f} s",
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
    if args.against:
        _print_pairs(console, results)
    out = {"at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "repeats": args.repeats,
           "back": args.back, "cpus": os.cpu_count(), "results": results}  # fmt: skip
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")
    Console(stderr=True).print(f"wrote {RESULTS.relative_to(REPO_ROOT)}")


def _print_pairs(console, results: list[dict]) -> None:
    """Per repository: each interpreter's medians and best CPU, and this one's over the other's."""
    from rich.table import Table

    table = Table(title="side by side (rounds in turn): this / against", title_justify="left")
    for col in ("repo", "median wall s", "median CPU s", "best CPU s", "median imports CPU s"):
        table.add_column(col, justify="left" if col == "repo" else "right")
    by = {(r["repo"], r["interpreter"]): r for r in results}
    for repo in dict.fromkeys(r["repo"] for r in results):
        a, b = by[(repo, "this")], by[(repo, "against")]
        cells = []
        for key in ("median_wall", "median_cpu", "cpu", "median_imports_cpu"):
            va, vb = a[key], b[key]
            cells.append(f"{va:.3f} / {vb:.3f} ({va / vb:.2f}x)")
        table.add_row(repo, *cells)
    console.print(table)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.argv = [sys.argv[0], "mine", *sys.argv[2:]]
        child(sys.argv[2:])
    else:
        main()
