"""The hybrid ranker: a linear score over a few signals per candidate entry, with weights fitted on
the tuning halves of the hand-written dev sets (bench/fit_fusion.py writes kbase/data/fusion.yaml).
Signals: BM25 and dense evidence (normalised score and reciprocal rank), how much of the question
the title covers, and priors that only fire when the question asks for them (the oldest feature PR
for "first"/"introduced", fixes and reverts for "broke"/"regression", a date range)."""

from __future__ import annotations

import functools
import re

import numpy as np
from kbase.retrieval.tokenize import read_data

FEATURES = (
    "bm25",  # BM25 score / best BM25 score among the candidates
    "bm25_rr",  # 1 / (RR_K + rank) in the BM25 list
    "dense",  # cosine rescaled to [0, 1] over the dense list
    "dense_rr",  # 1 / (RR_K + rank) in the dense list
    "dense_code",  # dense_rr x share of code-like words in the question
    "title",  # share of the question's words (and concepts) found in a PR card's title
    "first_feature",  # question says first/introduced and the PR is a feature
    "oldest",  # question says first/introduced: 1 for the oldest dated candidate .. 0 newest
    "fix",  # question says broke/regression/crash and the PR is a fix or a revert
    "revert",  # question says reverted and the PR is a revert
    "in_range",  # question names a date and the entry's date is in it
    "out_range",  # question names a date and the entry is dated outside it
    "ident",  # skills: best BM25 of a trigger/failure-mode chunk / best BM25 among the candidates
    "trig_cover",  # skills: share of the trigger/symptom line the question repeats most
    "dense_raw",  # cosine of the best chunk itself (not rescaled): how close, not only the rank
    "explained",  # skills: share of the question's words the skill's identifying text uses
    "bm25_level",  # log(1 + raw BM25) / log(1 + the question's word count): how much, not rank
)
RR_K = 5
# The weights of the old reciprocal-rank fusion: the fallback when no fitted file exists.
DEFAULT_WEIGHTS = {"bm25_rr": 2.0, "dense_rr": 1.0}
_FIX = frozenset({"fix", "revert"})
_CODE_WORD = re.compile(r"[A-Za-z0-9]_[A-Za-z0-9]|[a-z][A-Z]|\w\.\w|/|::|\(\)")


def code_share(query: str) -> float:
    words = query.split()
    return sum(bool(_CODE_WORD.search(w)) for w in words) / max(1, len(words))


@functools.cache
def fitted() -> dict:
    """kbase/data/fusion.yaml as a dict; {} when absent."""
    return read_data("fusion.yaml")


# The per-hit confidence model (fitted by bench/fit_fusion.py): a logistic regression over these
# values of a candidate, the probability that it fixes the question; `no_good_match` when the best
# candidate's probability is under the fitted threshold. The fused score and the BM25 share are
# relative to the other candidates: on a question the knowledge base lacks, some skill still tops
# the list. bm25_level is absolute (scaled by the question's length), and separated covered from
# uncovered tuning questions better under cross-validation (AUC 0.85 -> 0.87).
CONF_FEATURES = ("score", "lead", "trig_cover", "dense_raw", "ident", "explained", "bm25_level")


def confidence_features(X: np.ndarray, s: np.ndarray) -> np.ndarray:
    """(n, len(CONF_FEATURES)) for pool rows with feature rows X and fused scores s."""
    if s.size > 1:
        top2 = np.partition(s, -2)[-2:]
        other = np.where(s >= top2[1], top2[0], top2[1])  # best score among the others
    else:
        other = np.zeros_like(s)
    # the fused score and its lead, then the feature columns CONF_FEATURES names
    return np.column_stack([s, s - other, X[:, [FEATURES.index(f) for f in CONF_FEATURES[2:]]]])


def confidence_model() -> tuple[np.ndarray, float, float] | None:
    """(coefficients, bias, no-good-match threshold) from fusion.yaml; None before a fit."""
    m = fitted().get("confidence")
    if not m:
        return None
    # a feature the fit predates weighs nothing (the fit is re-run after features change)
    coef = np.asarray([float(m["coef"].get(f, 0.0)) for f in CONF_FEATURES], dtype=np.float64)
    return coef, float(m["bias"]), float(m["threshold"])


def confidences(F_: np.ndarray) -> np.ndarray:
    model = confidence_model()
    if model is None:  # no fit yet: the raw cosine is the least bad stand-in
        return np.clip(F_[:, 3], 0.0, 1.0)
    coef, bias, _ = model
    return 1.0 / (1.0 + np.exp(-(F_ @ coef + bias)))


def weights_vector(weights: dict[str, float] | None = None) -> np.ndarray:
    w = weights if weights is not None else (fitted().get("weights") or DEFAULT_WEIGHTS)
    unknown = set(w) - set(FEATURES)
    if unknown:
        raise ValueError(f"unknown fusion features {sorted(unknown)}; known: {FEATURES}")
    return np.asarray([float(w.get(f, 0.0)) for f in FEATURES], dtype=np.float64)


def add_priors(qp, order: list[int], rows: dict[int, int], X, col, dates, categories) -> None:
    """The priors a question asks for (first/introduced, broke/regression, reverted, a date
    range) into feature rows X of pool entries `order` (rows: entry -> row)."""
    if qp.intent_first:
        dated = sorted((dates[e] or "", e) for e in order if dates[e])
        n = max(1, len(dated) - 1)
        for r, (_, e) in enumerate(dated):
            X[rows[e], col["oldest"]] = 1.0 - r / n
        for e in order:
            if "feature" in categories[e]:
                X[rows[e], col["first_feature"]] = 1.0
    if qp.intent_fix or qp.intent_revert:
        for e in order:
            cats = set(categories[e])
            if qp.intent_fix and cats & _FIX:
                X[rows[e], col["fix"]] = 1.0
            if qp.intent_revert and "revert" in cats:
                X[rows[e], col["revert"]] = 1.0
    if qp.since or qp.until:
        for e in order:
            d = (dates[e] or "")[:10]
            if not d:
                continue
            inside = (not qp.since or d >= qp.since) and (not qp.until or d <= qp.until)
            X[rows[e], col["in_range" if inside else "out_range"]] = 1.0
