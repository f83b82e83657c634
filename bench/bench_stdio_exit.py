#!/usr/bin/env python3
"""How often `kbase mcp` exits badly when its client leaves at once: the client closes its end of
the server's stdout before the handshake (as tests/test_mcp_stdio.py's never-reading client does),
so the server stops within a second, while its start-up thread is still loading the query model.
Busy loops on the other cores make the race likelier (CI runs the suite in parallel).

    python bench/bench_stdio_exit.py --root KB [--home HOME] [--runs 80] [--busy 2] [--json]

KB must be indexed under HOME (or KB/.kbase). Prints the exit statuses and the stderr tail of each
bad exit; writes bench/results/stdio_exit.json. On a 2-core host with 2 busy loops, before the
server waited for its start-up thread (Service.finish): 12 of 230 runs aborted (-6: "terminate
called without an active exception", or "Fatal Python error: PyThreadState_Get" while
finalizing); after: 0 of 330.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_result  # noqa: E402
from mcp_record import initialize_request  # noqa: E402

HELLO = [
    initialize_request("2025-06-18", {"name": "raw", "version": "0"}),
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
]


def one_run(root: Path, home: Path, work: Path) -> tuple[int, str]:
    """A fresh copy of the index home per run: every server starts cold, as a new session does."""
    run_home = work / "home"
    shutil.rmtree(run_home, ignore_errors=True)
    shutil.copytree(home, run_home)
    err_path = work / "stderr.log"
    with open(err_path, "wb") as err:
        env = dict(os.environ, KBASE_HOME=str(run_home))
        cmd = [sys.executable, "-m", "kbase.cli", "mcp", "--root", str(root)]
        p = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env
        )
        assert p.stdin is not None and p.stdout is not None
        p.stdout.close()
        try:
            p.stdin.write(("\n".join(json.dumps(m) for m in HELLO) + "\n").encode())
            p.stdin.flush()
        except BrokenPipeError:
            pass
        rc = p.wait(120)
        p.stdin.close()
    return rc, err_path.read_text(errors="replace")[-600:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--home", type=Path, default=None)
    ap.add_argument("--runs", type=int, default=80)
    ap.add_argument("--busy", type=int, default=2, help="busy loops running beside the servers")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    home = args.home or args.root / ".kbase"
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    rcs: Counter[int] = Counter()
    bad = []
    try:
        with tempfile.TemporaryDirectory(prefix="kbase-stdio-exit-") as work:
            for i in range(args.runs):
                rc, tail = one_run(args.root, home, Path(work))
                rcs[rc] += 1
                if rc != 0:
                    bad.append({"run": i, "rc": rc, "stderr_tail": tail})
                    print(f"run {i}: exit {rc}\n{tail}", file=sys.stderr)
                print(f"\r{i + 1}/{args.runs}", end="", file=sys.stderr, flush=True)
    finally:
        for b in busy:
            b.kill()
    print(file=sys.stderr)
    res = {"runs": args.runs, "busy": args.busy, "exit_statuses": dict(rcs), "bad": bad}
    write_result("stdio_exit", res)
    print(json.dumps(res, indent=1) if args.json else f"exit statuses: {dict(rcs)}")


if __name__ == "__main__":
    main()
