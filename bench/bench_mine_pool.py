#!/usr/bin/env python3
"""Does the naming pool pay? A cold `kbase mine` with the mining process parsing alone
(KBASE_MINE_WORKERS=1) against two naming workers (the default on 2+ cores), in alternating runs
(the order flips each round), and whether the cards are the same byte for byte (issue #24:
speed machinery stays only at >= 1.3x end to end on 2 cores).

    python bench/bench_mine_pool.py --repo /tmp/cvA/flash-attention-replay:flash-attention \
        [--repo PATH:NAME ...] [--rounds 3] [--workers 2]

NAME picks the recipe (pr_archive/recipes/NAME.yaml, if any). Writes bench/results/mine_pool.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import children_cpu, mine_cmd, write_result  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

TARGET = 1.3


def mine_once(repo: Path, name: str, workers: str) -> tuple[dict[str, bytes], float, float]:
    """(card file -> bytes, wall s, CPU s of the mine and its children)."""
    root = Path(tempfile.mkdtemp(prefix=f"kbase-pool-{name}-"))
    (root / "pr_archive").mkdir()
    env = {**os.environ, "KBASE_MINE_WORKERS": workers}
    t, c = time.perf_counter(), children_cpu()
    subprocess.run(mine_cmd(repo, root, name), check=True, capture_output=True, env=env)
    wall, cpu = time.perf_counter() - t, children_cpu() - c
    cards = {p.name: p.read_bytes() for p in (root / "pr_archive" / name).glob("*.md")}
    return cards, wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", action="append", required=True, help="PATH:NAME (repeatable)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", default="2")
    args = ap.parse_args()
    sides = ("1", args.workers)
    rows = []
    for spec in args.repo:
        path, _, name = spec.rpartition(":")
        runs: dict[str, list[tuple[float, float]]] = {s: [] for s in sides}
        same = True
        for r in range(args.rounds):
            got = {}
            for side in sides if r % 2 == 0 else sides[::-1]:
                print(f"{name} round {r + 1}: {side} worker(s)", file=sys.stderr, flush=True)
                got[side], wall, cpu = mine_once(Path(path), name, side)
                runs[side].append((wall, cpu))
            same = same and got[sides[0]] == got[sides[1]]
        med = {s: statistics.median(w for w, _ in runs[s]) for s in sides}
        rows.append(
            {
                "repo": path,
                "name": name,
                "cards": len(got[sides[0]]),
                "cards_identical": same,
                "walls_s": {s: [round(w, 2) for w, _ in runs[s]] for s in sides},
                "cpus_s": {s: [round(c, 2) for _, c in runs[s]] for s in sides},
                "median_wall_s": {s: round(med[s], 2) for s in sides},
                "speedup": round(med[sides[0]] / med[sides[1]], 2),
            }
        )
    table = Table(
        title=f"cold mine: 1 process vs {args.workers} naming workers ({os.cpu_count()} cores)"
    )
    for col in ("history", "cards", "identical", "1 (s)", f"{args.workers} (s)", "speedup"):
        table.add_column(col)
    for row in rows:
        w = row["walls_s"]
        table.add_row(
            row["name"],
            str(row["cards"]),
            str(row["cards_identical"]),
            " / ".join(map(str, w["1"])),
            " / ".join(map(str, w[args.workers])),
            f"{row['speedup']:.2f}x",
        )
    Console(width=120).print(table)
    res = {"cores": os.cpu_count(), "rounds": args.rounds, "target": TARGET, "rows": rows}
    print(f"wrote {write_result('mine_pool', res)}", file=sys.stderr)


if __name__ == "__main__":
    main()
