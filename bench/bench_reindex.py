#!/usr/bin/env python3
"""Incremental re-index after one edit (issue #11: <= 1 s excluding model load, at ~6.5k entries).

    python bench/bench_reindex.py --root /tmp/kbw/kb --home /tmp/kbw/home [--edits 5] [--work DIR]
        [--without carried] [--name NAME]

Copies the root (skills/ and pr_archive/) and its index home into --work (the originals are never
written), runs a catch-up index (the copy has new paths and inodes: every card is hashed again,
nothing embedded), loads the document embedder, makes one warm-up edit (the first in a process
also imports chromadb and opens its client), then times --edits re-indexes that each follow an
edit of one more SKILL.md, and a no-op re-index. Each run: wall and CPU seconds (this process,
all threads) and the index report's stages. Writes bench/results/reindex.json.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import index_args, write_result  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402


def _timed(kb) -> dict:
    t, c = time.perf_counter(), time.process_time()
    rep = kb.index()
    return {
        "wall_s": round(time.perf_counter() - t, 3),
        "cpu_s": round(time.process_time() - c, 3),
        "embedded": rep.embedded_entries,
        "stages_s": rep.as_dict()["seconds"],
        "entries": rep.entries,
    }


def _edit(root: Path, k: int) -> None:
    victim = sorted((root / "skills").iterdir())[k] / "SKILL.md"
    text = victim.read_text(encoding="utf-8")
    victim.write_text(text + f"\n<!-- bench edit {time.time()} -->\n", encoding="utf-8")


def without(pieces: list[str]) -> None:
    """Turn off re-index machinery this bench weighs (issue #24: a piece stays only if it pays),
    replaced by the plain path the indexer takes anyway when that piece's files are missing:
    `carried`, every previous entry decoded (a generation without carry.json)."""
    from kbase.retrieval import build_stages as P

    unknown = set(pieces) - {"carried"}
    if unknown:
        raise SystemExit(f"--without: unknown {sorted(unknown)}")
    if "carried" in pieces:
        P.carried_entries = lambda *a, **k: None  # type: ignore[assignment]


def run(root: Path, home: Path, edits: int) -> dict:
    from kbase.api import KnowledgeBase

    kb = KnowledgeBase(root=root, home=home)
    catch_up = _timed(kb)
    kb.embedder()  # model load excluded: torch, and the ONNX session the index embeds with
    kb.index_embedder()
    _edit(root, 0)
    first = _timed(kb)
    runs = []
    for k in range(1, edits + 1):
        _edit(root, k)
        runs.append(_timed(kb))
    noop = _timed(kb)
    stages = {
        s: round(statistics.median(r["stages_s"][s] for r in runs), 3) for s in runs[0]["stages_s"]
    }
    return {
        "entries": catch_up["entries"],
        "catch_up": catch_up,
        "first_edit_in_process": first,
        "one_edit": {
            "median_wall_s": round(statistics.median(r["wall_s"] for r in runs), 3),
            "median_cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 3),
            "median_stages_s": stages,
            "runs": runs,
        },
        "noop": noop,
    }


def main() -> None:
    ap = index_args(__doc__ or "", "a root with skills/ (pr_archive/)", "its index home")
    ap.add_argument("--edits", type=int, default=5)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--name", default="reindex", help="result file name (e.g. for a baseline)")
    ap.add_argument("--without", default="", help="machinery to turn off (comma list): carried")
    args = ap.parse_args()
    without([p for p in args.without.split(",") if p])
    work = args.work or Path(tempfile.mkdtemp(prefix="kbase-reindex-"))
    root, home = work / "root", work / "home"
    for src, dst in ((args.root, root), (args.home, home)):
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst, symlinks=True)
    load = [round(x, 2) for x in os.getloadavg()]
    res = run(root, home, args.edits)
    res["load_avg_1_5_15_before"] = load
    res["load_avg_1_5_15_after"] = [round(x, 2) for x in os.getloadavg()]
    res["target_s"] = 1.0
    res["without"] = args.without
    one = res["one_edit"]
    t = Table(
        title=f"re-index, {res['entries']} entries, load average {load[0]} before, "
        f"{res['load_avg_1_5_15_after'][0]} after (2 cores)",
        title_justify="left",
    )
    for col in ("run", "wall s", "CPU s", "stages s"):
        t.add_column(col)
    t.add_row(
        "catch-up (copied home)", str(res["catch_up"]["wall_s"]), str(res["catch_up"]["cpu_s"]), ""
    )
    f = res["first_edit_in_process"]
    t.add_row(
        "first edit (imports chromadb)", str(f["wall_s"]), str(f["cpu_s"]), str(f["stages_s"])
    )
    for r in one["runs"]:
        t.add_row("one edit", str(r["wall_s"]), str(r["cpu_s"]), str(r["stages_s"]))
    t.add_row(
        "one edit, median (target <= 1 s)",
        str(one["median_wall_s"]),
        str(one["median_cpu_s"]),
        str(one["median_stages_s"]),
    )
    t.add_row(
        "no-op", str(res["noop"]["wall_s"]), str(res["noop"]["cpu_s"]), str(res["noop"]["stages_s"])
    )
    Console(width=200).print(t)
    res["kbase"] = str(Path(__import__("kbase").__file__).parent)
    out = write_result(args.name, res)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
