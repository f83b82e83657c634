#!/usr/bin/env python3
"""What the brace scanner adds to tree-sitter on real C, C++ and CUDA files (issue #24: hand-written
code in a library's place needs a benchmark that shows why it stays).

    python bench/bench_brace_scan.py [DIR ...]   (default: /usr/local/cuda/include)

Every line of every C-family file under DIR is looked up as a changed line would be: its owner
from tree-sitter, or from the brace scanner in the parse's ERROR regions and in files the scanner
reads alone (braces that do not balance, a parse past its budget). Reports the owned lines and
the definitions (name, kind) only the scanner names, and the CPU time of each. That is an upper
bound on what deleting the scanner loses: a tree walk written for no scanner names some of them
(the definitions kept in ERROR nodes): in /usr/local/cuda/include a checkout with the scanner
deleted, compared line by line with one that has it, lost 29% of the definitions where this
reports 62% (issue #24's symbol-scanner study, 2026-12).
Writes bench/results/brace_scan.json.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_result  # noqa: E402

MAX_BYTES = 400_000


def owners(path: Path, row: dict) -> None:
    from kbase.ingest.brace_scan import scan_defs
    from kbase.ingest.change_symbols import primary_defs

    data = path.read_bytes()
    t = time.process_time()
    ts, tree = primary_defs("cuda", data)
    row["parse_s"] += time.process_time() - t
    scan = None
    if tree is None:  # read by the scanner alone
        row["files_scanned_whole"] += 1
    elif ts.errors:
        t = time.process_time()
        scan = scan_defs(data)
        row["scan_s"] += time.process_time() - t
        row["files_with_error_regions"] += 1
    by_ts, by_scan = set(), set()
    for line in range(1, data.count(b"\n") + 2):
        if scan is not None and ts.in_error(line):
            sp, mine = scan.owner(line), by_scan
        else:
            sp, mine = ts.owner(line), (by_scan if tree is None else by_ts)
        if sp is not None:
            row["lines_owned"] += 1
            row["lines_by_scanner"] += mine is by_scan
            mine.add((sp.name, sp.kind))
    row["definitions"] += len(by_ts | by_scan)
    row["definitions_only_scanner"] += len(by_scan - by_ts)


def main() -> None:
    from kbase.ingest.definitions import grammar_for

    dirs = sys.argv[1:] or ["/usr/local/cuda/include"]
    res: dict = {"dirs": dirs}
    for d in dirs:
        row = dict.fromkeys(
            "files files_scanned_whole files_with_error_regions lines_owned lines_by_scanner "
            "definitions definitions_only_scanner parse_s scan_s".split(),
            0,
        )
        for dp, _, names in os.walk(d):
            for n in sorted(names):
                p = Path(dp, n)
                if grammar_for(n) == "cuda" and not p.is_symlink():
                    if p.stat().st_size <= MAX_BYTES:
                        row["files"] += 1
                        owners(p, row)
        row["parse_s"], row["scan_s"] = round(row["parse_s"], 2), round(row["scan_s"], 2)
        share = row["lines_by_scanner"] / max(row["lines_owned"], 1)
        only = row["definitions_only_scanner"] / max(row["definitions"], 1)
        print(
            f"{d}: {row['files']} files ({row['files_scanned_whole']} read by the scanner alone, "
            f"{row['files_with_error_regions']} with ERROR regions); the scanner names "
            f"{share:.1%} of {row['lines_owned']:,} owned lines and {only:.1%} of "
            f"{row['definitions']:,} definitions; CPU: primary {row['parse_s']} s, "
            f"error-region scans {row['scan_s']} s"
        )
        res[d] = row
    print(f"wrote {write_result('brace_scan', res)}", file=sys.stderr)


if __name__ == "__main__":
    main()
