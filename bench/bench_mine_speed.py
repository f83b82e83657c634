#!/usr/bin/env python3
"""How fast `kbase mine` is against git itself, side by side in one run, through the CLI as a
user runs it.

For each repository (replays of the shared histories, and a real clone when one is given):
- `git log --first-parent -p` (the baseline: git producing every diff of the main line);
- a full mine into a fresh root: `cold` (no definitions cache) and `warm` (`--full` again into
  a root whose cache an earlier mine filled: what a re-mine, another branch or a recipe change
  costs);
- a no-op re-mine (nothing new since the last mine);
- an incremental mine after 10 new commits (mined to HEAD~10 first, in a clone);
Each figure is wall time and CPU time (the process and every git it ran); the best of
`--repeats` rounds, git and the miner alternating within a round. The in-process time (the
report's `seconds`, without interpreter start-up) is listed beside the CLI figures.

    python3 bench/bench_mine_speed.py [--only NAME] [--repeats 2] [--real PATH] [--limit N]
                                      [--reference DIR]

`--real` (or KBASE_BENCH_REAL_REPO) names a real clone, bare or not, used read-only: its
objects are borrowed (`git clone --shared`), nothing is written into it; skipped when absent.
Writes bench/results/bench_mine_speed.json and prints a table. Targets: full mine <= 1.5x git
(CPU and wall), no-op <= 0.5 s wall, incremental after 10 commits <= 1 s wall.
"""

from __future__ import annotations

import argparse
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
from common import HISTORIES, SHARED, children_cpu, machine, mine_cmd  # noqa: E402

RESULTS = REPO_ROOT / "bench" / "results" / "bench_mine_speed.json"
TARGETS = {"ratio_max": 1.5, "noop_max_s": 0.5, "incremental_max_s": 1.0}


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """(wall s, CPU s of the command and everything it waited for, stdout)."""
    c0, t0 = children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall, cpu = time.perf_counter() - t0, children_cpu() - c0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} ... failed: {proc.stderr[-2000:]}")
    return wall, cpu, proc.stdout


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={repo}", *args], check=True, capture_output=True, text=True
    ).stdout


def mine(repo: Path, root: Path, name: str, *extra: str, cache: bool = True) -> dict:
    env = dict(os.environ, KBASE_MINE_CACHE="1" if cache else "0")
    (root / "pr_archive").mkdir(parents=True, exist_ok=True)
    wall, cpu, out = timed(mine_cmd(repo, root, name, *extra), env)
    report = json.loads(out)
    return {"wall": wall, "cpu": cpu, "in_process": report["seconds"], "report": report}


def best(rows: list[dict]) -> dict:
    return {
        "wall": min(r["wall"] for r in rows),
        "cpu": min(r["cpu"] for r in rows),
        "in_process": min(r["in_process"] for r in rows),
    }


def borrowed_clone(src_git_dir: Path, dest: Path, back: int = 0) -> Path:
    """A bare clone sharing `src`'s objects (nothing is written into `src`), its HEAD moved
    `back` first-parent commits back."""
    shutil.rmtree(dest, ignore_errors=True)
    subprocess.run(
        ["git", "clone", "-q", "--bare", "--shared", str(src_git_dir), str(dest)],
        check=True,
        capture_output=True,
    )
    if back:
        sha = git(dest, "rev-parse", f"HEAD~{back}").strip()
        git(dest, "update-ref", "HEAD", sha)
    return dest


def git_dir_of(path: Path) -> Path:
    out = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "--absolute-git-dir"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return Path(out)


def cards_of(root: Path, name: str) -> dict[str, bytes]:
    folder = root / "pr_archive" / name
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.md"))}


def differing(got: dict[str, bytes], want: dict[str, bytes]) -> list[str]:
    return sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))


def bench_repo(
    name: str, source: Path, work: Path, repeats: int, reference: Path | None = None
) -> dict:
    """`reference`: a folder of cards (`<name>.md` files) the mines must reproduce byte for
    byte, e.g. what the main branch's `kbase mine` wrote for the same repository."""
    gd = git_dir_of(source)
    commits = int(git(gd, "rev-list", "--count", "HEAD").strip())
    baseline, cold, warm = [], [], []
    warm_root = work / f"{name}-warm"
    shutil.rmtree(warm_root, ignore_errors=True)
    mine(gd, warm_root, name)  # fills the root's definitions cache
    want = None
    if reference is not None:
        want = {p.name: p.read_bytes() for p in sorted(reference.glob("*.md"))}
    diffs: dict[str, list[str]] = {}
    for i in range(repeats):  # side by side: git, the cold miner, the warm miner, each round
        w, c, _ = timed(["git", f"--git-dir={gd}", "log", "--first-parent", "-p"])
        baseline.append({"wall": w, "cpu": c, "in_process": w})
        root = work / f"{name}-cold-{i}"
        shutil.rmtree(root, ignore_errors=True)
        cold.append(mine(gd, root, name, cache=False))
        if want is not None:
            diffs[f"cold-{i}"] = differing(cards_of(root, name), want)
        shutil.rmtree(root, ignore_errors=True)
        warm.append(mine(gd, warm_root, name, "--full"))
        if want is not None:
            diffs[f"warm-{i}"] = differing(cards_of(warm_root, name), want)
    noop = [mine(gd, warm_root, name) for _ in range(max(3, repeats))]
    assert all(r["report"]["mode"] == "noop" for r in noop)

    incr = []
    for i in range(repeats):
        clone = borrowed_clone(gd, work / f"{name}-incr.git", back=10)
        root = work / f"{name}-incr-{i}"
        shutil.rmtree(root, ignore_errors=True)
        # a fresh root: its cache then holds what the mine to HEAD~10 parsed, no newer blob
        mine(clone, root, name)
        git(clone, "update-ref", "HEAD", git(gd, "rev-parse", "HEAD").strip())
        got = mine(clone, root, name)
        assert got["report"]["mode"] == "incremental", got["report"]["mode"]
        incr.append(got)
        shutil.rmtree(root, ignore_errors=True)
    g, co, wa = best(baseline), best(cold), best(warm)
    no, inc = best(noop), best(incr)
    return {
        "repo": name,
        "source": str(source),
        "commits": commits,
        "git_wall_s": round(g["wall"], 3),
        "git_cpu_s": round(g["cpu"], 3),
        "cold_wall_s": round(co["wall"], 3),
        "cold_cpu_s": round(co["cpu"], 3),
        "cold_in_process_s": round(co["in_process"], 3),
        "cold_ratio_wall": round(co["wall"] / g["wall"], 2),
        "cold_ratio_cpu": round(co["cpu"] / max(g["cpu"], 1e-6), 2),
        "warm_wall_s": round(wa["wall"], 3),
        "warm_cpu_s": round(wa["cpu"], 3),
        "warm_in_process_s": round(wa["in_process"], 3),
        "warm_ratio_wall": round(wa["wall"] / g["wall"], 2),
        "warm_ratio_cpu": round(wa["cpu"] / max(g["cpu"], 1e-6), 2),
        "noop_wall_s": round(no["wall"], 3),
        "noop_cpu_s": round(no["cpu"], 3),
        "noop_in_process_s": round(no["in_process"], 3),
        "incremental_commits": incr[0]["report"]["commits"],
        "incremental_wall_s": round(inc["wall"], 3),
        "incremental_cpu_s": round(inc["cpu"], 3),
        "incremental_in_process_s": round(inc["in_process"], 3),
        "reference": str(reference) if reference is not None else None,
        "cards_differing_from_reference": (
            {k: len(v) for k, v in diffs.items()} if reference is not None else None
        ),
        "differing_sample": sorted({x for v in diffs.values() for x in v})[:10],
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--only", action="append", default=None, help="history to run (repeatable)")
    ap.add_argument("--repeats", type=int, default=2, help="rounds; the best is kept")
    ap.add_argument("--limit", type=int, default=None, help="replay the first N commits only")
    ap.add_argument(
        "--real",
        type=Path,
        default=os.environ.get("KBASE_BENCH_REAL_REPO"),
        help="a real clone (bare or not) to measure too, read-only; its archive name is its "
        "folder's name unless --real-name",
    )
    ap.add_argument("--real-name", default="flashinfer", help="archive (and recipe) name")
    ap.add_argument("--keep", type=Path, default=None, help="work folder to keep and reuse")
    ap.add_argument(
        "--reference",
        type=Path,
        default=None,
        help="folder with <replay|real>-<name>/ card folders every mine must reproduce byte "
        "for byte (e.g. written by the main branch); the count that differ is reported",
    )
    args = ap.parse_args()

    from rich.console import Console
    from rich.table import Table

    err = Console(stderr=True)
    work = args.keep or Path(tempfile.mkdtemp(prefix="kbase-bench-mine-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for name in args.only if args.only is not None else HISTORIES:
            data = SHARED / "data" / "histories" / f"{name}.jsonl"
            repo = work / f"{name}-replay"
            if not repo.exists():
                cmd = [sys.executable, str(SHARED / "tools" / "replay_history.py"), str(data)]
                cmd += [str(repo)] + (["--limit", str(args.limit)] if args.limit else [])
                subprocess.run(cmd, check=True, capture_output=True)
            ref = _reference(args.reference, "replay", name)
            with err.status(f"{name} (replay) ..."):
                rows.append({"kind": "replay", **bench_repo(name, repo, work, args.repeats, ref)})
            _partial(rows)
        if args.real and Path(args.real).exists():
            with err.status(f"{args.real_name} (real clone {args.real}) ..."):
                ref = _reference(args.reference, "real", args.real_name)
                row = bench_repo(args.real_name, Path(args.real), work, args.repeats, ref)
                rows.append({"kind": "real", **row})
        elif args.real:
            err.print(f"[yellow]--real {args.real}: not found, skipped[/yellow]")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)

    table = Table(title="kbase mine against git log --first-parent -p", title_justify="left")
    cols = [
        ("repo", lambda r: f"{r['repo']} ({r['kind']})"),
        ("commits", "commits"),
        ("git wall/cpu s", lambda r: f"{r['git_wall_s']}/{r['git_cpu_s']}"),
        ("cold wall/cpu s", lambda r: f"{r['cold_wall_s']}/{r['cold_cpu_s']}"),
        ("cold ratio wall/cpu", lambda r: f"{r['cold_ratio_wall']}/{r['cold_ratio_cpu']}"),
        ("warm wall/cpu s", lambda r: f"{r['warm_wall_s']}/{r['warm_cpu_s']}"),
        ("warm ratio wall/cpu", lambda r: f"{r['warm_ratio_wall']}/{r['warm_ratio_cpu']}"),
        ("no-op wall/cpu (in-proc) s", lambda r: _three(r, "noop")),
        ("incr 10 wall/cpu (in-proc) s", lambda r: _three(r, "incremental")),
        (
            "cards != reference",
            lambda r: (
                "-"
                if r["cards_differing_from_reference"] is None
                else str(max(r["cards_differing_from_reference"].values(), default=0))
            ),
        ),
    ]
    for title, _ in cols:
        table.add_column(title, justify="left" if title == "repo" else "right")
    for r in rows:
        table.add_row(*[str(get(r) if callable(get) else r[get]) for _, get in cols])
    Console(width=220).print(table)
    checks = {
        "cold_ratio": all(
            max(r["cold_ratio_wall"], r["cold_ratio_cpu"]) <= TARGETS["ratio_max"] for r in rows
        ),
        "warm_ratio": all(
            max(r["warm_ratio_wall"], r["warm_ratio_cpu"]) <= TARGETS["ratio_max"] for r in rows
        ),
        "noop": all(r["noop_wall_s"] <= TARGETS["noop_max_s"] for r in rows),
        "incremental": all(r["incremental_wall_s"] <= TARGETS["incremental_max_s"] for r in rows),
        "identical_to_reference": (
            all(not any(r["cards_differing_from_reference"].values()) for r in rows)
            if args.reference is not None
            else None
        ),
    }
    out = {
        "targets": TARGETS,
        "checks": checks,
        "repeats": args.repeats,
        "limit": args.limit,
        "machine": {
            **machine(),
            "bytecode_cache": not os.environ.get("PYTHONDONTWRITEBYTECODE"),
        },
        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "results": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    err.print(f"wrote {RESULTS.relative_to(REPO_ROOT)}; checks {checks}")


def _reference(folder: Path | None, kind: str, name: str) -> Path | None:
    if folder is None:
        return None
    path = folder / f"{kind}-{name}"
    if not path.is_dir():
        raise SystemExit(f"--reference {folder}: no {kind}-{name}/ folder of cards in it")
    return path


def _partial(rows: list[dict]) -> None:
    """The rows so far, for a run cut short (the full result file is written at the end)."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.with_suffix(".partial.json").write_text(json.dumps(rows, indent=2) + "\n")


def _three(r: dict, key: str) -> str:
    return f"{r[f'{key}_wall_s']}/{r[f'{key}_cpu_s']} ({r[f'{key}_in_process_s']})"


if __name__ == "__main__":
    main()
