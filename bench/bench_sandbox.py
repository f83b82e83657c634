"""Benchmark the bubblewrap sandbox: every attack of issue #10 at full size, the per-snippet
overhead against the sandbox it replaced and bare Python, and the CPU-tier audit wall time
against the old runner, side by side in one run.

    python bench/bench_sandbox.py [--runs 20] [--baseline 8581300] [--workers 2] [--skip-audit]
                                  [--attack-scale 1.0] [--tier auto]

The "old" sandbox and runner are the code of --baseline (the commit before the sandbox change),
checked out of git into a temporary directory and run in child processes; both audits run the
skills of that commit (the old schema does not know `claims:`), on copies, with --no-record.
Prints rich tables; writes bench/results/bench_sandbox.json. Targets: every attack contained;
overhead <= 30 ms over bare `python -c pass`; audit <= 1.2x the old wall time.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "validators"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from attacks import ATTACKS, run_attack  # noqa: E402
from common import REPO, write_result  # noqa: E402

err = Console(stderr=True)


def bench_attacks(scale: float) -> list[dict]:
    rows = []
    for a in ATTACKS:
        err.print(f"attack {a.name} ...")
        r = run_attack(a, scale=scale)
        rows.append(
            {
                "attack": r.name,
                "what": r.what,
                "contained": r.contained,
                "verdict": r.verdict,
                "problems": r.problems,
                "leftovers": r.leftovers,
                "seconds": round(r.seconds, 2),
                "message": r.message[:200],
                "limits": getattr(r.outcome, "limits", {}),
            }
        )
    return rows


def _old_module(baseline: str, path: str, name: str):
    src = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{baseline}:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    tmp = Path(tempfile.mkdtemp(prefix="kbase-old-")) / f"{name}.py"
    tmp.write_text(src)
    spec = importlib.util.spec_from_file_location(name, tmp)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


def bench_overhead(runs: int, baseline: str) -> dict:
    """`python -c pass`: bare, in the old sandbox (unshare -rn + rlimits), in bubblewrap."""
    from kbase.validators.sandbox import Limits, run_sandboxed

    old = _old_module(baseline, "validators/sandbox.py", "kbase_old_sandbox")
    argv = [sys.executable, "-c", "pass"]
    times: dict[str, list[float]] = {"bare": [], "old": [], "bwrap": []}
    with tempfile.TemporaryDirectory(prefix="kbase-overhead-") as tmp:
        for _ in range(runs):  # interleaved, so that machine load hits all three alike
            t0 = time.perf_counter()
            subprocess.run(argv, check=True)
            times["bare"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            r = old.run_sandboxed(argv, Path(tmp), old.Limits(30), {"HOME": tmp})
            times["old"].append(time.perf_counter() - t0)
            assert r.returncode == 0, r
            t0 = time.perf_counter()
            r2 = run_sandboxed(argv, {}, Limits(30), lambda w: {"HOME": w})
            times["bwrap"].append(time.perf_counter() - t0)
            assert r2.returncode == 0 and r2.isolated, r2
    med = {k: round(statistics.median(v) * 1000, 1) for k, v in times.items()}
    return {
        "runs": runs,
        "median_ms": med,
        "min_ms": {k: round(min(v) * 1000, 1) for k, v in times.items()},
        "bwrap_minus_bare_ms": round(med["bwrap"] - med["bare"], 1),
        "old_minus_bare_ms": round(med["old"] - med["bare"], 1),
        "limits": r2.limits,
    }


def _old_tree(baseline: str, dest: Path) -> Path:
    """The baseline commit as an importable `kbase` package (its package-dir mapping rebuilt)."""
    arch = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", baseline],
        capture_output=True,
        check=True,
    ).stdout
    src = dest / "src"
    src.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(src)], input=arch, check=True)
    pkg = dest / "pkg"
    pkg.mkdir()
    os.symlink(src / "kbase", pkg / "kbase")
    for sub in ("validators", "ingest", "retrieval"):
        target = src / "kbase" / sub
        if not target.exists():
            os.symlink(src / sub, target)
    return src


def _audit(python_path: str | None, root: Path, workers: int, tier: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "KBASE_SIGNING_KEY"}
    if python_path:
        env["PYTHONPATH"] = python_path
    cmd = [sys.executable, "-c", "from kbase.cli import main; main()", "verify"]
    cmd += ["--tier", tier, "-j", str(workers), "--no-record", "--json", "--root", str(root)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=root)
    wall = time.perf_counter() - t0
    try:
        results = json.loads(p.stdout)["results"]
    except (json.JSONDecodeError, KeyError):
        return {"wall_s": round(wall, 1), "error": p.stderr[-500:]}
    verdicts: dict[str, int] = {}
    for r in results:
        key = f"{r['tier']}:{r['verdict']}"
        verdicts[key] = verdicts.get(key, 0) + 1
    return {"wall_s": round(wall, 1), "runs": len(results), "verdicts": verdicts}


def bench_audit(baseline: str, workers: int, tier: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="kbase-audit-cmp-") as tmp:
        src = _old_tree(baseline, Path(tmp) / "old")
        out = {}
        for name, pypath in (("old", str(Path(tmp) / "old" / "pkg")), ("bwrap", None)):
            root = Path(tmp) / f"root-{name}"
            root.mkdir()
            subprocess.run(["cp", "-r", str(src / "skills"), str(root / "skills")], check=True)
            err.print(f"CPU-tier verify of the {baseline} skills with the {name} runner ...")
            out[name] = _audit(pypath, root, workers, tier)
    if "error" not in out["old"] and "error" not in out["bwrap"]:
        out["ratio"] = round(out["bwrap"]["wall_s"] / out["old"]["wall_s"], 2)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=20, help="runs per overhead measurement")
    ap.add_argument("--baseline", default="8581300", help="commit with the old sandbox")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tier", default="auto")
    ap.add_argument("--attack-scale", type=float, default=1.0, help="1.0: the issue's sizes")
    ap.add_argument("--skip-audit", action="store_true")
    ap.add_argument("--skip-attacks", action="store_true")
    args = ap.parse_args()

    result: dict = {"baseline": args.baseline, "cpus": os.cpu_count()}
    if not args.skip_attacks:
        result["attacks"] = bench_attacks(args.attack_scale)
    err.print(f"per-snippet overhead x{args.runs} ...")
    result["overhead"] = bench_overhead(args.runs, args.baseline)
    if not args.skip_audit:
        result["audit"] = bench_audit(args.baseline, args.workers, args.tier)

    con = Console()
    if "attacks" in result:
        t = Table(title=f"attacks (scale {args.attack_scale})")
        for col in ("attack", "contained", "verdict", "leftovers", "s", "what the run said"):
            t.add_column(col, overflow="fold")
        for a in result["attacks"]:
            ok = "[green]yes[/]" if a["contained"] else "[red]NO[/] " + "; ".join(a["problems"])
            t.add_row(
                a["attack"],
                ok,
                a["verdict"],
                ", ".join(a["leftovers"]) or "none",
                f"{a['seconds']:.1f}",
                a["message"][:90],
            )
        con.print(t)
    o = result["overhead"]
    t = Table(title=f"per-snippet overhead, `python -c pass`, median of {o['runs']}")
    for col in ("how", "median ms", "min ms", "over bare"):
        t.add_column(col)
    for k, label in (("bare", "bare"), ("old", "old sandbox"), ("bwrap", "bubblewrap")):
        over = "" if k == "bare" else f"+{o['median_ms'][k] - o['median_ms']['bare']:.1f} ms"
        t.add_row(label, str(o["median_ms"][k]), str(o["min_ms"][k]), over)
    con.print(t)
    if "audit" in result:
        a = result["audit"]
        t = Table(title=f"CPU-tier verify of the {args.baseline} skills, -j {args.workers}")
        for col in ("runner", "wall s", "runs", "verdicts"):
            t.add_column(col, overflow="fold")
        for k in ("old", "bwrap"):
            r = a[k]
            t.add_row(k, str(r["wall_s"]), str(r.get("runs", "")), json.dumps(r.get("verdicts", r)))
        if "ratio" in a:
            t.add_row("ratio", f"{a['ratio']}x", "", "target <= 1.2x")
        con.print(t)
    out = write_result("bench_sandbox", result)
    err.print(f"wrote {out}")
    contained = all(a["contained"] for a in result.get("attacks", []))
    return 0 if contained else 1


if __name__ == "__main__":
    sys.exit(main())
