#!/usr/bin/env python3
"""Two checkouts' cold `kbase mine` of the same replays, side by side: wall and CPU time in
alternating runs (the order flips each round), and what changes on the cards (issue #24: does
a piece of the miner pay?).

    python bench/bench_mine_ab.py --replays /tmp/kbase-devsets [--other-python python3]
                                  [--names flash-attention deepgemm] [--rounds 3]

--replays holds <name>-replay clones (bench/devset_kb.py makes them). Each side's `kbase mine`
runs from a neutral directory under its own Python, so it imports its own checkout (default
other side: `python3`, which imports /work/main). Per history: cards whose file symbols or
`touched` list differ, symbols on each side (a file's symbols counted once each), those only one
side names. Writes bench/results/mine_ab.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import HISTORIES, children_cpu, mine_cmd, write_result  # noqa: E402


def mine_once(python: str, replay: Path, name: str) -> tuple[Path, float, float]:
    """(the fresh root mined into, wall s, CPU s of the mine and its gits)."""
    root = Path(tempfile.mkdtemp(prefix=f"kbase-ab-{name}-"))
    (root / "pr_archive").mkdir()
    cmd = mine_cmd(replay, root, name, python=python)
    t, c = time.perf_counter(), children_cpu()
    subprocess.run(cmd, check=True, capture_output=True, cwd=tempfile.gettempdir())
    return root, time.perf_counter() - t, children_cpu() - c


def card_symbols(root: Path, name: str) -> dict[str, tuple[dict[str, list[str]], list[str]]]:
    """card file -> ({path: symbols}, touched)."""
    from kbase.ingest.card_format import split_card

    out = {}
    for p in sorted((root / "pr_archive" / name).glob("*.md")):
        meta = split_card(p.read_text(encoding="utf-8")).meta
        files = {f["path"]: list(f.get("symbols") or []) for f in meta.get("files") or []}
        out[p.name] = (files, list(meta.get("touched") or []))
    return out


def compare(a: dict, b: dict) -> dict:
    """What side b names differently from side a."""
    cards_sym = cards_touched = files_changed = 0
    total_a = total_b = lost = gained = 0
    for card in a.keys() & b.keys():
        (fa, ta), (fb, tb) = a[card], b[card]
        changed = False
        for path in fa.keys() | fb.keys():
            sa, sb = Counter(fa.get(path, [])), Counter(fb.get(path, []))
            total_a, total_b = total_a + sum(sa.values()), total_b + sum(sb.values())
            lost += sum((sa - sb).values())
            gained += sum((sb - sa).values())
            if sa != sb:
                files_changed += 1
                changed = True
        cards_sym += changed
        cards_touched += ta != tb
    return {
        "cards": len(a),
        "cards_only_one_side": len(a.keys() ^ b.keys()),
        "cards_symbols_changed": cards_sym,
        "cards_touched_changed": cards_touched,
        "files_symbols_changed": files_changed,
        "symbols_a": total_a,
        "symbols_b": total_b,
        "symbols_lost": lost,
        "symbols_gained": gained,
        "lost_share": round(lost / total_a, 4) if total_a else 0.0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--replays", type=Path, required=True)
    ap.add_argument("--other-python", default="python3", help="side a (the reference)")
    ap.add_argument("--names", nargs="*", default=list(HISTORIES))
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    sides = {"a": args.other_python, "b": sys.executable}
    res: dict = {"sides": sides, "histories": {}}
    for name in args.names:
        replay = args.replays / f"{name}-replay"
        times: dict[str, list[tuple[float, float]]] = {"a": [], "b": []}
        roots: dict[str, Path] = {}
        for r in range(args.rounds):
            for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
                root, wall, cpu = mine_once(sides[side], replay, name)
                times[side].append((wall, cpu))
                if roots.setdefault(side, root) != root:
                    shutil.rmtree(root)
        row = compare(card_symbols(roots["a"], name), card_symbols(roots["b"], name))
        for root in roots.values():
            shutil.rmtree(root)
        for side, ts in times.items():
            row[f"wall_s_{side}"] = round(statistics.median(w for w, _ in ts), 2)
            row[f"cpu_s_{side}"] = round(statistics.median(c for _, c in ts), 2)
            row[f"runs_{side}"] = [[round(w, 2), round(c, 2)] for w, c in ts]
        res["histories"][name] = row
        print(name, json.dumps(row), flush=True)
    print(f"wrote {write_result('mine_ab', res)}", file=sys.stderr)


if __name__ == "__main__":
    main()
