#!/usr/bin/env python3
"""Fit the hybrid ranker's weights (retrieval/fusion.py) on the TUNING halves of the dev sets and
of the real-problem set (bench/realprobs.yaml), then the per-hit confidence model
(bench/fit_confidence.py), and write kbase/data/fusion.yaml. Test halves are scored, never fitted.

    python bench/fit_fusion.py [--work /tmp/kbase-devsets] [--dry-run] [--skills-only]
                               [--keep-weights]

--skills-only leaves out the PR archives (and so the PR set): a quick fit for development.
--keep-weights refits only the confidence model and its threshold over the shipped weights.

Coordinate ascent over a small grid per feature, maximising the mean over the two sets (PR and
skill questions count equally) of MRR@10 + lam x margin, where margin is how far the best right
answer scores above the best wrong one (tanh-squashed, weights scaled to sum 1). The margin term
keeps the fit from drifting where MRR is flat (the skill tuning half is nearly saturated); lam is
chosen by 2-fold cross-validation inside the tuning half. The weights written are the mean of
BAGS such fits on bootstrap resamples of the tuning questions (each scaled to sum 1): one ascent
over a flat objective lands on whichever grid corner a few questions favour, and a refit after a
small change moved the test figures more than the change did. Bagging raised the 2-fold held-out
MRR of the tuning half from 0.8655 to 0.8731 (PR 0.740 -> 0.753, skills 0.917 -> 0.923, real
problems 0.940 -> 0.944).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO  # noqa: E402
from devset_kb import build_kb  # noqa: E402

KIND = {"prs": "pr", "skills": "skill", "realprobs": "skill"}
GRID = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
NEG_GRID = (0.0, -0.1, -0.25, -0.5, -1.0, -2.0, -4.0)


def pools(kb, queries, kind: str | None = None):
    """[(feature matrix, relevance vector)] per query, computed once; `kind` overrides the
    query's own set (PR questions asked of the skills: questions no skill answers)."""
    from kbase.retrieval.query import plan

    s = kb.searcher()
    idx = s.index()
    out = []
    for q in queries:
        kind = kind or KIND[getattr(q, "set", "realprobs")]
        mask = idx.entry_mask(kind, None, [], None, None)
        p = s.pool(idx, plan(q.query), kind, None, [], mask)
        rel = np.asarray([idx.entries[e].id in q.expected for e in p.entries], dtype=bool)
        out.append((p.features, rel))
    return out


def mrr(ps, w: np.ndarray, depth: int = 10) -> float:
    total = 0.0
    for X, rel in ps:
        if not rel.any():
            continue
        s = X @ w
        best = s[rel].max()
        rank = int((s > best).sum())  # ties resolved in the relevant entry's favour
        if rank < depth:
            total += 1.0 / (rank + 1)
    return total / max(1, len(ps))


LAMBDAS = (0.0, 0.05, 0.1, 0.2, 0.5)


def margin(ps, w: np.ndarray) -> float:
    wn = w / (np.abs(w).sum() or 1.0)
    total = 0.0
    for X, rel in ps:
        if rel.any() and not rel.all():
            s = X @ wn
            total += float(np.tanh(20.0 * (s[rel].max() - s[~rel].max())))
    return total / max(1, len(ps))


def objective(by_set: dict, w: np.ndarray, lam: float = 0.0) -> float:
    return float(np.mean([mrr(ps, w) + lam * margin(ps, w) for ps in by_set.values()]))


def choose_lambda(by_set: dict, start: np.ndarray, features: tuple[str, ...]) -> tuple[float, dict]:
    """2-fold cross-validation inside the tuning half: fit on one fold, MRR on the other."""
    cv = {}
    for lam in LAMBDAS:
        vals = []
        for fold in (0, 1):
            train = {n: [p for i, p in enumerate(ps) if i % 2 != fold] for n, ps in by_set.items()}
            held = {n: [p for i, p in enumerate(ps) if i % 2 == fold] for n, ps in by_set.items()}
            w = fit(train, start, features, lam)
            vals.append(objective(held, w))
        cv[lam] = round(float(np.mean(vals)), 4)
    return max(cv, key=lambda k: (cv[k], -k)), cv


def fit(
    by_set: dict, start: np.ndarray, features: tuple[str, ...], lam: float = 0.0, passes: int = 4
) -> np.ndarray:
    w = start.copy()
    best = objective(by_set, w, lam)
    for _ in range(passes):
        improved = False
        for i, f in enumerate(features):
            if not f:  # a feature left out of this fit (bench/cv_fusion.py) keeps its start
                continue
            grid = NEG_GRID if f == "out_range" else GRID
            for v in grid:
                trial = w.copy()
                trial[i] = v
                if not trial.any():
                    continue
                val = objective(by_set, trial, lam)
                if val > best + 1e-9:
                    best, w, improved = val, trial, True
        if not improved:
            break
    return w


BAGS = 8


def bagged(
    by_set: dict, start: np.ndarray, features: tuple[str, ...], lam: float, seed: int = 0
) -> np.ndarray:
    """The mean of BAGS fits on bootstrap resamples of each set (fixed seed: reproducible)."""
    rng = np.random.default_rng(seed)
    ws = []
    for _ in range(BAGS):
        sample = {n: [ps[i] for i in rng.integers(0, len(ps), len(ps))] for n, ps in by_set.items()}
        w = fit(sample, start, features, lam)
        ws.append(w / (np.abs(w).sum() or 1.0))
    return np.round(np.mean(ws, axis=0), 4)


def main() -> None:
    import devsets as D
    from kbase.retrieval import fusion as F

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--dry-run", action="store_true", help="print, do not write fusion.yaml")
    ap.add_argument(
        "--no-mine", action="store_true", help="reuse the archives already mined in --work"
    )
    ap.add_argument("--skills-only", action="store_true", help="no PR archives, no PR set")
    ap.add_argument(
        "--tune-only", action="store_true", help="never score the test halves (for tuning)"
    )
    ap.add_argument(
        "--keep-weights",
        action="store_true",
        help="keep the shipped fusion weights; refit only the confidence model and threshold",
    )
    args = ap.parse_args()
    halves_used = ("tune",) if args.tune_only else D.HALVES
    work = args.work or Path(tempfile.mkdtemp(prefix="kbase-devsets-"))
    if args.skills_only:
        from devset_kb import build_skills_kb

        kb = build_skills_kb(work)
    else:
        kb = build_kb(work, mine=not args.no_mine)
    kb.warm_up()
    ids = {e.id for e in kb.searcher().index().entries}
    t = time.perf_counter()
    halves: dict[str, dict] = {"tune": {}, "test": {}}
    unanswerable: list = []  # tuning questions no skill answers (for the confidence model)
    for name in D.SETS:
        if args.skills_only and name == "prs":
            continue
        ok, _ = D.known(D.load(REPO / "tests" / "eval", name), ids)
        for h in halves_used:
            halves[h][name] = pools(kb, [q for q in ok if q.half == h])
        if name == "prs":
            unanswerable += pools(kb, [q for q in ok if q.half == "tune"], kind="skill")
    import realprobs as R

    real = R.load(REPO / "bench" / "realprobs.yaml")
    for h in halves_used:
        halves[h]["realprobs"] = pools(kb, [p for p in real if p.half == h and p.covered])
    # The threshold is set on the calibration rows only (nothing was written from them): the
    # other tune rows' own triggers lift their scores, and a threshold set with them hid the
    # fixing skill of 8 in 20 fresh-35 tune problems and 6 in 18 fresh-36 ones.
    tuned = [p for p in real if p.half == "tune" and p.covered]  # aligned with its pools
    calibrate = [
        x for p, x in zip(tuned, halves["tune"]["realprobs"], strict=True) if p.calibration
    ]
    unanswerable += pools(kb, [p for p in real if p.half == "tune" and not p.covered])
    print(f"features for all questions in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    start = F.weights_vector(F.DEFAULT_WEIGHTS)
    shipped = F.fitted()
    if args.keep_weights:
        lam, w = shipped.get("lambda", 0.0), F.weights_vector()
    else:
        lam, cv = choose_lambda(halves["tune"], start, F.FEATURES)
        print(f"lambda by 2-fold CV on the tuning half: {lam} (held-out MRR {cv})")
        w = bagged(halves["tune"], start, F.FEATURES, lam)
    for label, vec in (("rrf (old default)", start), ("fitted", w)):
        row = {h: {n: round(mrr(ps, vec), 4) for n, ps in halves[h].items()} for h in halves_used}
        print(f"{label:18s} MRR@10 {row}")
    weights = {f: float(v) for f, v in zip(F.FEATURES, w, strict=True) if v}
    print("weights:", weights)
    from fit_confidence import fit_confidence

    covered = [p for name, ps in halves["tune"].items() if KIND[name] == "skill" for p in ps]
    repos = [p.repo for p in tuned if p.calibration]
    conf = fit_confidence(covered, unanswerable, w, calibrate=calibrate, groups=repos)
    print("confidence:", conf)
    if not args.dry_run:
        import yaml

        out = REPO / "kbase" / "data" / "fusion.yaml"
        header = (
            "# Hybrid ranker weights and the hit confidence model (retrieval/fusion.py),\n"
            "# fitted by bench/fit_fusion.py on the TUNING halves of tests/eval/devset_*.yaml\n"
            "# and bench/realprobs.yaml only. Re-run it after changing features.\n"
        )
        body = {
            "weights": weights,
            "fitted_on": {n: len(ps) for n, ps in halves["tune"].items()},
            "lambda": lam,
            "tuning_mrr": {n: round(mrr(ps, w), 4) for n, ps in halves["tune"].items()},
            "confidence": conf,
        }
        if args.keep_weights:  # the weights' own record stays; the confidence says what it saw
            body.update({k: shipped[k] for k in ("fitted_on", "tuning_mrr") if k in shipped})
        out.write_text(header + yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
        print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
