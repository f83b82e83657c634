#!/usr/bin/env python3
"""Symbol precision and recall on the hand-written fixtures (tests/fixtures/mining/): each is a
file before and after a change with the definitions that enclose every changed line.

Each fixture becomes a real git repository (base commit, then the change); `kbase mine`
names the symbols. Micro-averaged precision and recall over all fixtures, and over kernels
alone.

    python3 bench/bench_symbols.py

Writes bench/results/bench_symbols.json and prints a table. Target: >= 0.95 each, kernels
included.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests"))
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "mining"
RESULTS = REPO_ROOT / "bench" / "results" / "bench_symbols.json"


def build(case: Path, tmp: Path) -> tuple[dict, Path]:
    """A repository of the case: a base commit holding the file before, then the change (the
    fixture's own `change.patch` applied by `git apply`, as the tests do)."""
    import git
    from mining_fixtures import apply_change, before, truth

    spec = truth(case.name)
    repo = git.Repo.init(tmp / case.name, initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "B").set_value("user", "email", "b@example.invalid")
    work = Path(repo.working_dir)
    (work / "README.md").write_text("bench\n")
    old = before(case.name)
    if old is not None:
        (work / spec["path"]).parent.mkdir(parents=True, exist_ok=True)
        (work / spec["path"]).write_bytes(old)
    repo.git.add("-A")
    repo.git.commit("-q", "-m", "base (#1)")
    apply_change(case.name, work)
    repo.git.add("-A")
    repo.git.commit("-q", "-m", "change (#2)")
    return spec, work


def score(rows: list[tuple[set[str], set[str]]]) -> dict:
    tp = sum(len(got & want) for got, want in rows)
    fp = sum(len(got - want) for got, want in rows)
    fn = sum(len(want - got) for got, want in rows)
    return {
        "precision": round(tp / (tp + fp), 3) if tp + fp else 1.0,
        "recall": round(tp / (tp + fn), 3) if tp + fn else 1.0,
        "tp": tp,
        "fp": fp,
        "fn": fn,
    }


def main() -> None:
    from kbase.ingest.card_format import split_card
    from kbase.ingest.mining import mine

    from kbase.schema import PRCard, Recipe

    recipe = Recipe(name="fix", upstream="https://github.com/example/fix")
    tmp = Path(tempfile.mkdtemp(prefix="kbase-bench-symbols-"))
    per_case = []
    parsed_all, parsed_k = [], []
    t_parse = 0.0
    try:
        for case in sorted(p for p in FIXTURES.iterdir() if (p / "truth.yaml").exists()):
            truth, work = build(case, tmp)
            want, want_k = set(truth["symbols"]), set(truth.get("kernels") or [])
            t0 = time.perf_counter()
            mine(work, tmp / f"{case.name}-kb", recipe)
            t_parse += time.perf_counter() - t0
            card = PRCard.model_validate(
                split_card(
                    (tmp / f"{case.name}-kb" / "pr_archive" / "fix" / "2.md").read_text()
                ).meta
            )
            f = next(x for x in card.files if x.path == truth["path"])
            got, got_k = set(f.symbols), set(f.kernels)
            parsed_all.append((got, want))
            parsed_k.append((got_k, want_k))
            per_case.append(
                {
                    "case": case.name,
                    "parsed": score([(got, want)]),
                    "named_by": sorted(set(f.named_by)),
                    "missing": sorted(want - got),
                    "extra": sorted(got - want),
                }
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    from rich.console import Console
    from rich.table import Table

    table = Table(title="symbols vs hand-written ground truth", title_justify="left")
    for col in ("case", "P parsed", "R parsed", "named by"):
        table.add_column(col, justify="left" if col in ("case", "named by") else "right")
    for r in per_case:
        table.add_row(
            r["case"],
            f"{r['parsed']['precision']:.2f}",
            f"{r['parsed']['recall']:.2f}",
            ", ".join(r["named_by"]),
        )
    total = {
        "parsed": score(parsed_all),
        "parsed_kernels": score(parsed_k),
    }
    for k, v in total.items():
        table.add_row(f"ALL {k}", f"{v['precision']:.2f}", f"{v['recall']:.2f}", "")
    Console(width=140).print(table)
    met = all(
        total[k][m] >= 0.95 for k in ("parsed", "parsed_kernels") for m in ("precision", "recall")
    )
    out = {
        "target": 0.95,
        "met": met,
        "totals": total,
        "seconds": {"parsed_mines": round(t_parse, 3)},
        "cases": per_case,
        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(REPO_ROOT)}; target {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
