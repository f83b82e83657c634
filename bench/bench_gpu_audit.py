#!/usr/bin/env python3
"""The GPU audit of the whole corpus, timed: `kbase verify --tier gpu -j N` over every skill that
declares the gpu tier, in the sandbox, recording (and signing, with KBASE_SIGNING_KEY) its rows.

    python bench/bench_gpu_audit.py [--jobs 6] [--timeout 560] [--mirror DIR] [SKILL ...]

On a leased machine give a --timeout below the lease's time left and --mirror the folder that
comes back ($OUT): rows recorded before a kill then survive it.

Prints the wall time and, from the rows the run appended to the ledger, how the device gate split
the runs: exclusive runs (timings, profiles, device-wide memory) hold the GPU alone and are the
critical path; shared runs overlap. Writes bench/results/gpu_audit.json. Run it on the GPU machine
(CONTRIBUTING.md, "The GPU tier"); the issue's target is <= 6 minutes for 100 skills.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, write_result  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402


def _mirror(ledger: Path, dest: Path | None) -> None:
    if dest is not None and ledger.exists():
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ledger, dest / "verifications.jsonl")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--timeout", type=float, default=560.0, help="seconds for the whole audit")
    ap.add_argument("--root", type=Path, default=REPO)
    ap.add_argument(
        "--mirror",
        type=Path,
        default=None,
        help="copy the ledger here every few seconds while the audit runs, so rows recorded before "
        "a kill (a device lease running out) are not lost",
    )
    ap.add_argument("skills", nargs="*")
    args = ap.parse_args()

    ledger = args.root / "ledger" / "verifications.jsonl"
    before = len(ledger.read_text().splitlines()) if ledger.exists() else 0
    cmd = [sys.executable, "-P", "-m", "kbase.cli", "verify", "--root", str(args.root)]
    cmd += ["--tier", "gpu", "-j", str(args.jobs), "--json", *args.skills]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        while proc.poll() is None:
            if time.perf_counter() - t0 > args.timeout:
                proc.kill()
            _mirror(ledger, args.mirror)
            time.sleep(5)
        wall = time.perf_counter() - t0
        _mirror(ledger, args.mirror)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if args.mirror is not None:  # every run's message and output tail, for the failures
        (args.mirror / "verify.json").write_text(stdout)
    try:
        results = json.loads(stdout)["results"]
    except (json.JSONDecodeError, KeyError):
        print(stdout[-2000:], stderr[-2000:], file=sys.stderr)
        raise SystemExit("verify printed no JSON") from None
    rows = (
        [json.loads(x) for x in ledger.read_text().splitlines()[before:]] if ledger.exists() else []
    )
    by_use: dict[str, list[float]] = {}
    for r in rows:
        if r.get("tier") == "gpu":
            by_use.setdefault(r.get("limits", {}).get("gpu_use", "?"), []).append(r["duration_s"])
    verdicts = Counter(r["verdict"] for r in results if r["tier"] == "gpu")
    ran = sum(n for v, n in verdicts.items() if v != "skip")
    res = {
        "jobs": args.jobs,
        "skills_run": ran,
        "verdicts": dict(verdicts),
        "wall_s": round(wall, 1),
        "per_skill_s": round(wall / max(1, ran), 2),
        "exclusive": {
            "runs": len(by_use.get("exclusive", [])),
            "sum_s": round(sum(by_use.get("exclusive", [])), 1),
        },
        "shared": {
            "runs": len(by_use.get("shared", [])),
            "sum_s": round(sum(by_use.get("shared", [])), 1),
        },
        "serial_estimate_s": round(sum(sum(v) for v in by_use.values()), 1),
        "rows_recorded": len(rows),
        "not_passing": [
            {"skill": r["skill"], "verdict": r["verdict"], "message": r["message"][:200]}
            for r in results
            if r["tier"] == "gpu" and r["verdict"] not in ("pass", "skip")
        ],
    }
    t = Table(title=f"GPU audit, -j {args.jobs}")
    for col in (
        "skills",
        "wall",
        "per skill",
        "exclusive runs (sum)",
        "shared runs (sum)",
        "serial sum",
    ):
        t.add_column(col)
    t.add_row(
        str(ran),
        f"{res['wall_s']} s",
        f"{res['per_skill_s']} s",
        f"{res['exclusive']['runs']} ({res['exclusive']['sum_s']} s)",
        f"{res['shared']['runs']} ({res['shared']['sum_s']} s)",
        f"{res['serial_estimate_s']} s",
    )
    Console().print(t)
    print(dict(verdicts))
    for bad in res["not_passing"]:
        print(f"  {bad['skill']}: {bad['verdict']} {bad['message']}")
    print(f"wrote {write_result('gpu_audit', res)}", file=sys.stderr)


if __name__ == "__main__":
    main()
