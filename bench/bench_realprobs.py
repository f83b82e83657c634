#!/usr/bin/env python3
"""Retrieval on real problems (issue #25, bench/realprobs.yaml): this checkout and another one
(default: /work/main with the Python that imports it) side by side in one run, each over its own
shipped skills.

    python bench/bench_realprobs.py [--other-python python3] [--other-root /work/main]
                                    [--work /tmp/kbase-realprobs] [--blind]

Per side and half: Hit@1/3/5 and MRR on covered problems (a fixing skill exists), how often
`no_good_match` is true on uncovered ones and false on covered ones, whether the compact candidate
list holds a fixing skill, its size, warm latency (p50/p95 of KnowledgeBase.query) and a cold
`kbase search --json` (median of 5). Per repository on the test half, and the ten worst test misses
of this checkout with the other's rank beside them. The same figures apart ("fresh") for the rows
of each collection batch (fresh-35, fresh-36, ...: realprobs.BATCHES), collected after trigger
writing, per half, with and without the rows whose error line a trigger already quotes. Prints
tables; writes bench/results/realprobs.json. --blind is for tuning: the tune half only, no test
figure printed or written (the test half is looked at once, at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import realprobs as R  # noqa: E402
from common import REPO, write_result  # noqa: E402

WORKER = Path(__file__).resolve().parent / "realprobs_worker.py"
COLD_QUERIES = (
    "out of resource: shared memory, Required: 131072, Hardware limit: 101376",
    "illegal memory access only for very large batches",
    "fp32 tl.dot result differs from torch",
    "torch.compile recompiles every step",
    "NaN in attention output for fully masked rows",
)


def run_side(python: str, skills: Path, work: Path, questions: Path) -> dict:
    """The worker under `python` from a neutral directory, so it imports that side's kbase."""
    work.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(
        [python, str(WORKER), str(skills), str(work), str(questions)],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"{python}: worker failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout)


def cold_cli(python: str, work: Path) -> float:
    """Median wall seconds of `kbase search --json` in a fresh process over the side's index."""
    env = {**os.environ, "KBASE_HOME": str(work / "home")}
    times = []
    for q in COLD_QUERIES:
        t = time.perf_counter()
        subprocess.run(
            [
                python,
                "-m",
                "kbase.cli",
                "search",
                q,
                "--json",
                "-k",
                "5",
                "--root",
                str(work / "kb"),
            ],
            capture_output=True,
            env=env,
            cwd=tempfile.gettempdir(),
            check=True,
        )
        times.append(time.perf_counter() - t)
    return round(statistics.median(times), 3)


def rank_of(ids: list[str], expected: tuple[str, ...]) -> int | None:
    return next((i for i, x in enumerate(ids) if x in expected), None)


def scores(probs: list, answers: list[dict]) -> dict:
    cov = [(p, a) for p, a in zip(probs, answers, strict=True) if p.covered]
    unc = [a for p, a in zip(probs, answers, strict=True) if not p.covered]
    ranks = [rank_of(a["ids"], p.expected) for p, a in cov]
    n = max(1, len(cov))
    out = {
        "covered": len(cov),
        "uncovered": len(unc),
        "hit@1": round(sum(r == 0 for r in ranks) / n, 4),
        "hit@3": round(sum(r is not None and r < 3 for r in ranks) / n, 4),
        "hit@5": round(sum(r is not None and r < 5 for r in ranks) / n, 4),
        "mrr": round(sum(1 / (r + 1) for r in ranks if r is not None) / n, 4),
    }
    # is the first hit's confidence a probability? How often the first hit is right, by its
    # confidence (docs/agents.md quotes the test half)
    confs = [a["confidence"][0] if a["confidence"] else None for _, a in cov]
    if cov and confs[0] is not None:
        bins = {}
        for lo, hi in ((0.0, 0.4), (0.4, 0.8), (0.8, 1.01)):
            got = [r for r, c in zip(ranks, confs, strict=True) if lo <= c < hi]
            right = sum(r == 0 for r in got)
            bins[f"{lo}-{min(hi, 1.0)}"] = f"{right / len(got):.2f} of {len(got)}" if got else "-"
        out["top1_right_by_confidence"] = bins
        out["top1_confidence_mean"] = round(sum(confs) / len(confs), 3)
    flags = [a["no_good_match"] for a in unc]
    if flags and flags[0] is not None:
        out["no_good_match_uncovered"] = round(sum(flags) / len(flags), 4)
        cf = [a["no_good_match"] for _, a in cov]
        out["no_good_match_false_covered"] = round(1 - sum(cf) / max(1, len(cf)), 4)
    if cov and cov[0][1]["candidates"] is not None:
        held = [bool(set(a["candidates"]) & set(p.expected)) for p, a in cov]
        out["candidates_hold_fix"] = round(sum(held) / n, 4)
        out["candidates_chars_max"] = max(a["candidates_chars"] or 0 for _, a in cov)
    return out


def restrict(probs: list, answers: list[dict], batch: str, half: str, literal: bool | None = None):
    """The rows of one collection batch and half (and, when `literal` is given, only those whose
    literal_in_skill equals it), with their answers: figures on problems nobody tuned on."""
    keep = [
        i
        for i, p in enumerate(probs)
        if p.batch == batch
        and p.half == half
        and (literal is None or p.literal_in_skill == literal)
    ]
    return [probs[i] for i in keep], [answers[i] for i in keep]


def fresh_scores(probs: list, answers: list[dict], halves: tuple[str, ...]) -> dict:
    """Per collection batch (each of realprobs.BATCHES, in order) and half: the batch's rows, all
    of them and without those whose error line a trigger already quotes (literal_in_skill)."""
    out: dict = {}
    for b in sorted(R.BATCHES):
        out[b] = {}
        for h in halves:
            out[b][h] = {"all": scores(*restrict(probs, answers, b, h))}
            out[b][h]["no_literal"] = scores(*restrict(probs, answers, b, h, literal=False))
    return out


def per_repo(probs: list, answers: dict[str, list[dict]]) -> dict:
    rows: dict[str, dict] = {}
    for repo in sorted({p.repo for p in probs}):
        sel = [i for i, p in enumerate(probs) if p.repo == repo]
        rows[repo] = {
            side: scores([probs[i] for i in sel], [ans[i] for i in sel])
            for side, ans in answers.items()
        }
    return rows


def worst(probs: list, mine: list[dict], other: list[dict], n: int = 10) -> list[dict]:
    """Covered test problems this checkout ranks worst (unranked first), with the other's rank."""
    rows = []
    for p, a, b in zip(probs, mine, other, strict=True):
        if not p.covered:
            continue
        r = rank_of(a["ids"], p.expected)
        if r == 0:
            continue
        rows.append(
            {
                "id": p.id,
                "url": p.url,
                "query": p.query,
                "expected": list(p.expected),
                "rank": r,
                "other_rank": rank_of(b["ids"], p.expected),
                "top3": a["ids"][:3],
            }
        )
    rows.sort(key=lambda x: -(x["rank"] if x["rank"] is not None else 99))
    return rows[:n]


def latency(answers: list[dict]) -> dict:
    ms = sorted(a["ms"] for a in answers)
    return {"p50_ms": round(statistics.median(ms), 2), "p95_ms": round(ms[int(0.95 * len(ms))], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--other-python", default="python3", help="the Python that imports `other`")
    ap.add_argument("--other-root", type=Path, default=Path("/work/main"))
    ap.add_argument("--work", type=Path, default=None, help="work folder to keep and reuse")
    ap.add_argument("--blind", action="store_true", help="tune half only: no test figures")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="kbase-realprobs-"))
    probs = R.load(REPO / "bench" / "realprobs.yaml")
    qfile = work / "questions.json"
    work.mkdir(parents=True, exist_ok=True)
    qfile.write_text(json.dumps([p.query for p in probs]), encoding="utf-8")
    sides = {
        "this": (sys.executable, REPO / "skills", work / "this"),
        "other": (args.other_python, args.other_root / "skills", work / "other"),
    }
    got = {}
    for name, (py, skills, w) in sides.items():
        t = time.perf_counter()
        got[name] = run_side(py, skills, w, qfile)
        got[name]["cold_cli_s"] = cold_cli(py, w)
        print(f"{name}: answered in {time.perf_counter() - t:.0f}s", file=sys.stderr)
    res: dict = {"other_root": str(args.other_root), "sides": {}, "per_repo_test": {}}
    for name in sides:
        ans = got[name]["answers"]
        res["sides"][name] = {
            h: scores(
                [p for p in probs if p.half == h],
                [a for p, a in zip(probs, ans, strict=True) if p.half == h],
            )
            for h in ("tune", "test")
        } | {"latency": latency(ans), "cold_cli_s": got[name]["cold_cli_s"]}
    halves = ("tune",) if args.blind else ("tune", "test")
    res["fresh"] = {n: fresh_scores(probs, got[n]["answers"], halves) for n in sides}
    test = [i for i, p in enumerate(probs) if p.half == "test"]
    res["per_repo_test"] = per_repo(
        [probs[i] for i in test], {n: [got[n]["answers"][i] for i in test] for n in sides}
    )
    res["worst_test_misses"] = worst(
        [probs[i] for i in test],
        [got["this"]["answers"][i] for i in test],
        [got["other"]["answers"][i] for i in test],
    )
    if args.blind:
        for side in res["sides"].values():
            del side["test"]
        res = {"other_root": res["other_root"], "sides": res["sides"], "blind": True} | {
            "fresh": res["fresh"]
        }
    print_tables(res)
    out = write_result("realprobs-blind" if args.blind else "realprobs", res)
    print(f"wrote {out}", file=sys.stderr)


def print_tables(res: dict) -> None:
    keys: tuple[str, ...] = ("hit@1", "hit@3", "hit@5", "mrr", "no_good_match_uncovered")
    keys += ("no_good_match_false_covered", "candidates_hold_fix")
    print(f"{'side/half':12s} " + " ".join(f"{k[:18]:>18s}" for k in keys))
    for side, r in res["sides"].items():
        for h in [h for h in ("tune", "test") if h in r]:
            row = " ".join(f"{r[h].get(k, float('nan')):>18.3f}" for k in keys)
            print(f"{side + '/' + h:12s} {row}")
        print(f"{'':12s} warm {r['latency']}  cold CLI {r['cold_cli_s']} s")
    print("\nfresh batches apart (collected after trigger writing; 'no_literal' leaves out rows")
    print("whose error line a trigger already quotes):")
    for side, r in res["fresh"].items():
        for batch, by_half in r.items():
            for h, sub in by_half.items():
                for which, sc in sub.items():
                    row = " ".join(f"{sc.get(k, float('nan')):>18.3f}" for k in keys)
                    name = f"{side}/{batch}/{h}/{which}"
                    print(f"{name:32s} n={sc['covered']}+{sc['uncovered']} {row}")
    if res.get("blind"):
        return
    print("\nper repository, test half (covered n, MRR this vs other):")
    for repo, r in res["per_repo_test"].items():
        a, b = r["this"], r["other"]
        print(f"  {repo:40s} n={a['covered']:2d}  {a['mrr']:.3f} vs {b['mrr']:.3f}")
    print("\nworst test misses (this rank / other rank):")
    for m in res["worst_test_misses"]:
        print(
            f"  {m['id']:22s} {m['rank']} / {m['other_rank']}  "
            f"want {m['expected']}  got {m['top3']}"
        )


if __name__ == "__main__":
    main()
