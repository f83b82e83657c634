#!/usr/bin/env python3
"""Mining speed on the replayed real histories (../shared), against git's own cost.

For each history: replay it into a real repository, time the raw
`git log --first-parent --numstat -p -U0` on it, time `kbase mine` from scratch (the
CLI, as a user runs it), time a no-op re-mine, and time loading every card as index
entries. Targets: mine / raw git ≤ 3, no-op re-mine ≤ 1 s.

    python3 bench/bench_mine.py [--limit N] [--repeats 2] [--keep DIR]

Writes bench/results/bench_mine.json and prints a table. CPU seconds (this process's
children, i.e. git and the CLI) are reported beside wall seconds, because wall time on a
busy machine says more about the neighbours than about the miner.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"
HISTORIES = ("lmdeploy", "flashinfer")
RESULTS = REPO_ROOT / "bench" / "results" / "bench_mine.json"


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(cmd: list[str], **kw) -> tuple[float, float, subprocess.CompletedProcess]:
    c0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, **kw)
    return time.perf_counter() - t0, _children_cpu() - c0, proc


def best(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return min(r[0] for r in runs), min(r[1] for r in runs)


def bench_one(name: str, work: Path, limit: int | None, repeats: int) -> dict:
    data = SHARED / "data" / "histories" / f"{name}.jsonl"
    repo = work / f"{name}-replay"
    if not repo.exists():
        cmd = [sys.executable, str(SHARED / "tools" / "replay_history.py"), str(data), str(repo)]
        if limit:
            cmd += ["--limit", str(limit)]
        subprocess.run(cmd, check=True, capture_output=True)
    commits = int(
        subprocess.run(
            ["git", "-C", str(repo), "rev-list", "--first-parent", "--count", "HEAD"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    raw_cmd = ["git", "-C", str(repo), "log", "--first-parent", "--numstat", "-p", "-U0"]
    raw = []
    for _ in range(repeats):
        w, c, _ = timed(raw_cmd, stdout=subprocess.DEVNULL, check=True)
        raw.append((w, c))
    mine_runs, report = [], {}
    for i in range(repeats):
        root = work / f"{name}-kb-{i}"
        shutil.rmtree(root, ignore_errors=True)
        cmd = [
            sys.executable,
            "-m",
            "kbase.cli",
            "mine",
            "--repo",
            str(repo),
            "--name",
            name,
            "--root",
            str(root),
            "--recipe",
            str(REPO_ROOT / "pr_archive" / "recipes" / f"{name}.yaml"),
            "--json",
        ]
        w, c, proc = timed(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"kbase mine failed on {name}: {proc.stderr}")
        report = json.loads(proc.stdout)
        mine_runs.append((w, c))
    noop_w, noop_c, proc = timed(cmd, capture_output=True, text=True)
    noop = json.loads(proc.stdout)
    raw_w, raw_c = best(raw)
    mine_w, mine_c = best(mine_runs)

    sys.path.insert(0, str(REPO_ROOT))
    from kbase.ingest.cards import load_card_entries

    t0 = time.perf_counter()
    entries, problems = load_card_entries(root)
    load_s = time.perf_counter() - t0
    return {
        "repo": name,
        "commits": commits,
        "prs": report["prs"],
        "without_pr": report["without_pr"],
        "raw_git_wall_s": round(raw_w, 3),
        "raw_git_cpu_s": round(raw_c, 3),
        "mine_wall_s": round(mine_w, 3),
        "mine_cpu_s": round(mine_c, 3),
        "ratio_wall": round(mine_w / raw_w, 2),
        "ratio_cpu": round(mine_c / raw_c, 2),
        "noop_mode": noop["mode"],
        "noop_wall_s": round(noop_w, 3),
        "noop_cpu_s": round(noop_c, 3),
        "load_entries_s": round(load_s, 3),
        "entries": len(entries),
        "entry_problems": len(problems),
        "archive": str(root),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--limit", type=int, default=None, help="replay only the first N commits of each history"
    )
    ap.add_argument(
        "--repeats", type=int, default=2, help="runs of raw git and of mining; the best is kept"
    )
    ap.add_argument(
        "--keep", type=Path, default=None, help="work folder to keep (replays are reused from it)"
    )
    args = ap.parse_args()
    if not (SHARED / "tools" / "replay_history.py").exists():
        raise SystemExit(f"shared histories not found at {SHARED}")

    from rich.console import Console
    from rich.table import Table

    err = Console(stderr=True)
    work = args.keep or Path(tempfile.mkdtemp(prefix="kbase-bench-mine-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for name in HISTORIES:
            with err.status(f"replaying and mining {name} ..."):
                rows.append(bench_one(name, work, args.limit, args.repeats))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    for r in rows:
        r.pop("archive")

    table = Table(title=f"kbase mine vs raw git log (best of {args.repeats})", title_justify="left")
    for col in (
        "repo",
        "commits",
        "PRs",
        "git wall s",
        "mine wall s",
        "ratio wall",
        "git cpu s",
        "mine cpu s",
        "ratio cpu",
        "no-op s",
        "load cards s",
    ):
        table.add_column(col, justify="right" if col != "repo" else "left")
    for r in rows:
        table.add_row(
            r["repo"],
            str(r["commits"]),
            str(r["prs"]),
            f"{r['raw_git_wall_s']:.2f}",
            f"{r['mine_wall_s']:.2f}",
            f"{r['ratio_wall']:.2f}",
            f"{r['raw_git_cpu_s']:.2f}",
            f"{r['mine_cpu_s']:.2f}",
            f"{r['ratio_cpu']:.2f}",
            f"{r['noop_wall_s']:.2f}",
            f"{r['load_entries_s']:.2f}",
        )
    Console(width=160).print(table)
    ok = all(r["ratio_wall"] <= 3 and r["noop_wall_s"] <= 1 for r in rows)
    out = {
        "targets": {"ratio_max": 3, "noop_max_s": 1},
        "met": ok,
        "limit": args.limit,
        "repeats": args.repeats,
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "git": subprocess.run(
                ["git", "--version"], capture_output=True, text=True
            ).stdout.strip(),
        },
        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "results": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    err.print(f"wrote {RESULTS.relative_to(REPO_ROOT)}; targets {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
