#!/usr/bin/env python3
"""Leave-repository-out cross-validation of the fusion weights and the no-good-match threshold on
the TUNE half of the real-problem set (issue #25). The test half is never read.

    python bench/cv_fusion.py --work /tmp/kbase-devsets [--folds 8] [--variants shipped,full]

The tune half is saturated in-sample (its triggers were written from its rows), so an in-sample
figure says nothing about new problems. Here every real tune problem is scored by weights and a
confidence model fitted without its repository's rows (the dev-set tuning halves always stay in the
fit, as in bench/fit_fusion.py). Repositories are packed into --folds folds of about equal size.

Variants (each refitted per fold the way fit_fusion.py fits, minus the lambda search):
  shipped  the weights in kbase/data/fusion.yaml as they are (in-sample for old rows)
  full     every feature, bagged coordinate ascent (what fit_fusion.py does)
  small    only the features a skill question uses (no PR priors, no title)
  shrunk   `full` averaged with the reciprocal-rank prior (halfway to the old default)
The calibration rows of bench/realprobs.yaml (nothing was written from them) are also reported
apart ("fresh"), the others as "old". Prints a table; writes bench/results/cv_fusion.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, write_result  # noqa: E402

SMALL = ("bm25", "bm25_rr", "dense_rr", "dense_code", "ident", "trig_cover", "dense_raw")
SMALL += ("explained", "bm25_level")


def repo_folds(repos: list[str], k: int) -> dict[str, int]:
    """Greedy packing of repositories (largest first) into k folds of about equal row count."""
    sizes: dict[str, int] = {}
    for r in repos:
        sizes[r] = sizes.get(r, 0) + 1
    load = [0] * k
    out = {}
    for r in sorted(sizes, key=lambda r: (-sizes[r], r)):
        f = int(np.argmin(load))
        out[r] = f
        load[f] += sizes[r]
    return out


def ranks(ps, w: np.ndarray) -> list[int | None]:
    out: list[int | None] = []
    for X, rel in ps:
        if not rel.any() or X.shape[0] == 0:
            out.append(None)
            continue
        s = X @ w
        out.append(int((s > s[rel].max()).sum()))
    return out


def summary(rk: list[int | None]) -> dict:
    n = max(1, len(rk))
    return {
        "n": len(rk),
        "hit@1": round(sum(r == 0 for r in rk) / n, 4),
        "hit@3": round(sum(r is not None and r < 3 for r in rk) / n, 4),
        "mrr": round(sum(1 / (r + 1) for r in rk if r is not None and r < 10) / n, 4),
    }


def fit_variant(name: str, train: dict, start: np.ndarray, shipped: np.ndarray) -> np.ndarray:
    from fit_fusion import bagged
    from kbase.retrieval import fusion as F

    if name == "shipped":
        return shipped
    if name == "small":
        feats = tuple(f if f in SMALL else "" for f in F.FEATURES)
        w = bagged(train, start, feats, 0.0)
        return np.where([f in SMALL for f in F.FEATURES], w, 0.0)
    w = bagged(train, start, F.FEATURES, 0.0)
    if name == "shrunk":
        prior = start / np.abs(start).sum()
        return 0.5 * w + 0.5 * prior
    return w


def main() -> None:
    import devsets as D
    import fit_confidence as FC
    import realprobs as R
    from devset_kb import build_kb
    from fit_confidence import fit_confidence
    from fit_fusion import pools
    from kbase.retrieval import fusion as F

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--folds", type=int, default=8)
    ap.add_argument("--variants", default="shipped,full,small,shrunk")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="kbase-devsets-"))
    kb = build_kb(work, mine=False)
    kb.warm_up()
    t = time.perf_counter()
    base: dict = {}
    for name in D.SETS:
        qs = [q for q in D.load(REPO / "tests" / "eval", name) if q.half == "tune"]
        base[name] = pools(kb, qs)
    negatives = pools(
        kb, [q for q in D.load(REPO / "tests" / "eval", "prs") if q.half == "tune"], "skill"
    )
    real = [p for p in R.load(REPO / "bench" / "realprobs.yaml") if p.half == "tune"]
    real_pools = pools(kb, real)
    print(f"features in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    fold = repo_folds([p.repo for p in real], args.folds)
    start = F.weights_vector(F.DEFAULT_WEIGHTS)
    shipped = F.weights_vector()
    variants = args.variants.split(",")
    got: dict[str, dict] = {
        v: {"rank": [None] * len(real), "flag": [None] * len(real)} for v in variants
    }
    for k in range(args.folds):
        held = [i for i, p in enumerate(real) if fold[p.repo] == k]
        keep = [i for i, p in enumerate(real) if fold[p.repo] != k]
        cov_keep = [real_pools[i] for i in keep if real[i].covered]
        unc_keep = [real_pools[i] for i in keep if not real[i].covered]
        train = {**base, "realprobs": cov_keep}
        for v in variants:
            w = fit_variant(v, train, start, shipped)
            covered = base["skills"] + cov_keep
            # the threshold on the calibration rows only, as bench/fit_fusion.py sets it
            cal = [i for i in keep if real[i].covered and real[i].calibration]
            conf = fit_confidence(
                covered,
                negatives + unc_keep,
                w,
                calibrate=[real_pools[i] for i in cal],
                groups=[real[i].repo for i in cal],
            )
            beta = np.append([conf["coef"][f] for f in FC.USE], conf["bias"])
            bc = FC.best_conf([real_pools[i] for i in held], w, beta)
            for j, i in enumerate(held):
                got[v]["rank"][i] = ranks([real_pools[i]], w)[0]
                got[v]["flag"][i] = bool(bc[j] < conf["threshold"])
        print(f"fold {k + 1}/{args.folds} ({len(held)} rows)", file=sys.stderr)
    res = {}
    subsets = {
        "all": list(range(len(real))),
        "old": [i for i, p in enumerate(real) if not p.calibration],
        "fresh": [i for i, p in enumerate(real) if p.calibration],
    }
    for v in variants:
        res[v] = {}
        for sname, idxs in subsets.items():
            cov = [i for i in idxs if real[i].covered]
            unc = [i for i in idxs if not real[i].covered]
            row = summary([got[v]["rank"][i] for i in cov])
            row["ngm_true_uncovered"] = (
                round(np.mean([got[v]["flag"][i] for i in unc]), 4) if unc else None
            )
            row["ngm_false_covered"] = (
                round(1 - np.mean([got[v]["flag"][i] for i in cov]), 4) if cov else None
            )
            row["uncovered"] = len(unc)
            res[v][sname] = row
    print_table(res)
    out = write_result("cv_fusion", {"folds": args.folds, "variants": res})
    print(f"wrote {out}", file=sys.stderr)


def print_table(res: dict) -> None:
    keys = ("n", "hit@1", "hit@3", "mrr", "ngm_true_uncovered", "ngm_false_covered")
    print(f"{'variant/subset':22s} " + " ".join(f"{k[:18]:>18s}" for k in keys))
    for v, subs in res.items():
        for s, row in subs.items():
            vals = " ".join(f"{row[k] if row[k] is not None else float('nan'):>18}" for k in keys)
            print(f"{v + '/' + s:22s} {vals}")


if __name__ == "__main__":
    main()
