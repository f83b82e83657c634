"""The per-hit confidence model and the no-good-match threshold (issue #25), fitted on the tuning
halves after the fusion weights (bench/fit_fusion.py calls `fit_confidence`).

Each question contributes its top 10 candidates under the fitted weights, labelled 1 when the
candidate is one of its answers. Questions no skill answers (real problems without a fixing skill,
and PR-history questions asked of the skills) contribute only negatives. A logistic regression over
retrieval.fusion.CONF_FEATURES gives each hit a probability; `no_good_match` is set when the best
hit's probability is under the threshold that keeps it false for COVERED_KEEP of the answerable
tuning problems (the real ones, whose wording is what the flag is for).

Two guards against an optimistic flag, both judged on the tuning half alone:
- the features are standardised before the fit (the coefficients are folded back), so the L2
  penalty does not depend on the fusion weights' scale (bagged weights sum to 1);
- the threshold is the quantile of OUT-OF-FOLD confidences: each answerable real problem is scored
  by a model fitted without it (FOLDS folds, a repository's problems held out together: they
  share wording). In-sample, the model has seen the question's right answer among its positives
  and rates it higher than it would rate a new question.
"""

from __future__ import annotations

import numpy as np

COVERED_KEEP = 0.95
TOP = 10
FOLDS = 5
# The features the model uses (the others get coefficient 0). Fitted on every feature, the model
# separated covered from uncovered real tune problems worse on repositories it had not seen
# (leave-repository-out AUC 0.85 on the 44 problems no trigger was written from) than on the fused
# score and its lead over the runner-up alone (AUC 0.88): the trigger and evidence features mostly
# restate what the score already weighs, and add room to fit the tuning rows' own wording.
USE = ("score", "lead")


def _cols() -> list[int]:
    from kbase.retrieval import fusion as F

    return [F.CONF_FEATURES.index(f) for f in USE]


def rows(pools, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(confidence features, labels, question id) over each pool's top TOP candidates; only the
    USE columns."""
    from kbase.retrieval import fusion as F

    feats, labels, qid = [], [], []
    for i, (X, rel) in enumerate(pools):
        if X.shape[0] == 0:
            continue
        s = X @ w
        top = np.argsort(-s, kind="stable")[:TOP]
        feats.append(F.confidence_features(X, s)[top][:, _cols()])
        labels.append(rel[top].astype(np.float64))
        qid.append(np.full(top.size, i))
    return np.vstack(feats), np.concatenate(labels), np.concatenate(qid)


def logistic(Z: np.ndarray, y: np.ndarray, l2: float = 1e-2, steps: int = 200) -> np.ndarray:
    """Newton's method on the L2-regularised log loss over standardised features; returns
    [coef..., bias] for the features as given."""
    mu, sd = Z.mean(axis=0), Z.std(axis=0)
    sd[sd == 0] = 1.0
    beta = _newton((Z - mu) / sd, y, l2, steps)
    coef = beta[:-1] / sd
    return np.append(coef, beta[-1] - float(coef @ mu))


def _newton(Z: np.ndarray, y: np.ndarray, l2: float, steps: int) -> np.ndarray:
    A = np.column_stack([Z, np.ones(len(Z))])
    beta = np.zeros(A.shape[1])
    reg = np.eye(A.shape[1]) * l2
    reg[-1, -1] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(A @ beta)))
        grad = A.T @ (p - y) + reg @ beta
        hess = (A * (p * (1 - p))[:, None]).T @ A + reg
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    return beta


def best_conf(pools, w: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """Each question's highest confidence (0 for an empty pool)."""
    from kbase.retrieval import fusion as F

    out = []
    for X, _ in pools:
        if X.shape[0] == 0:
            out.append(0.0)
            continue
        z = F.confidence_features(X, X @ w)[:, _cols()] @ beta[:-1] + beta[-1]
        out.append(float((1.0 / (1.0 + np.exp(-z))).max()))
    return np.asarray(out)


def folds_of(n: int, groups: list[str] | None) -> list[int]:
    """Fold of each of n questions: every FOLDS-th one, or by group (a repository's questions
    share their wording, so they are held out together; groups packed round-robin)."""
    if groups is None:
        return [i % FOLDS for i in range(n)]
    order = {g: k % FOLDS for k, g in enumerate(sorted(set(groups)))}
    return [order[g] for g in groups]


def out_of_fold(
    covered: list, uncovered: list, w: np.ndarray, calibrate: list, groups: list[str] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Best confidence of each `calibrate` and each `uncovered` pool under a model fitted
    without it (fold i holds every FOLDS-th question of each list; `groups`: the calibrate
    questions' repositories, held out a repository at a time)."""
    held = {id(p): f for p, f in zip(calibrate, folds_of(len(calibrate), groups), strict=True)}
    held_u = {id(p): i % FOLDS for i, p in enumerate(uncovered)}
    cov, unc = np.zeros(len(calibrate)), np.zeros(len(uncovered))
    for k in range(FOLDS):
        Z1, y1, _ = rows([p for p in covered if held.get(id(p)) != k], w)
        Z0, y0, _ = rows([p for p in uncovered if held_u[id(p)] != k], w)
        beta = logistic(np.vstack([Z1, Z0]), np.concatenate([y1, y0]))
        at = [i for i, p in enumerate(calibrate) if held[id(p)] == k]
        cov[at] = best_conf([calibrate[i] for i in at], w, beta)
        at = [i for i, p in enumerate(uncovered) if held_u[id(p)] == k]
        unc[at] = best_conf([uncovered[i] for i in at], w, beta)
    return cov, unc


def fit_confidence(
    covered: list,
    uncovered: list,
    w: np.ndarray,
    calibrate: list | None = None,
    groups: list[str] | None = None,
) -> dict:
    """`covered`/`uncovered`: tuning pools [(X, rel)] of answerable / unanswerable questions;
    `calibrate`: the answerable pools the threshold is set on (default `covered`), `groups`
    their repositories (out-of-fold by repository). The real problems, not the hand-written
    questions beside the skills, are what the flag is for."""
    from kbase.retrieval import fusion as F

    Z1, y1, _ = rows(covered, w)
    Z0, y0, _ = rows(uncovered, w)
    beta = logistic(np.vstack([Z1, Z0]), np.concatenate([y1, y0]))
    cov, unc = out_of_fold(covered, uncovered, w, calibrate if calibrate else covered, groups)
    threshold = float(np.quantile(cov, 1.0 - COVERED_KEEP)) if cov.size else 0.5
    coef = dict(zip(USE, beta[:-1], strict=True))
    return {
        "coef": {f: round(float(coef.get(f, 0.0)), 5) for f in F.CONF_FEATURES},
        "bias": round(float(beta[-1]), 5),
        "threshold": round(threshold, 5),
        "tuning": {
            "covered_false": round(float((cov >= threshold).mean()), 4) if cov.size else None,
            "uncovered_true": round(float((unc < threshold).mean()), 4) if unc.size else None,
            "covered": int(cov.size),
            "uncovered": int(unc.size),
            "out_of_fold": "repository" if groups else True,  # scored by a model without it
        },
    }
