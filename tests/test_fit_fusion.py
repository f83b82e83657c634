"""bench/fit_fusion.py's bagged fit: reproducible, weights scaled to sum 1, and the signal that
ranks the right answer first gets the weight."""

from __future__ import annotations

import sys

import numpy as np
from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import fit_fusion as FF  # noqa: E402


def _pools(rng: np.random.Generator, n: int) -> list:
    """n questions of 6 candidates: feature 0 puts the right one first, feature 1 last, feature
    2 is noise."""
    out = []
    for _ in range(n):
        X = rng.random((6, 3))
        right = int(rng.integers(6))
        X[right, 0], X[right, 1] = X[:, 0].max() + 0.1, X[:, 1].min() - 0.1
        rel = np.zeros(6, dtype=bool)
        rel[right] = True
        out.append((X, rel))
    return out


def test_bagged_fit_is_reproducible_and_weighs_the_signal():
    rng = np.random.default_rng(7)
    by_set = {"a": _pools(rng, 30), "b": _pools(rng, 20)}
    start = np.asarray([0.0, 1.0, 1.0])  # starts on the wrong signals
    feats = ("good", "bad", "noise")
    w = FF.bagged(by_set, start, feats, lam=0.0)
    assert np.array_equal(w, FF.bagged(by_set, start, feats, lam=0.0))
    assert abs(np.abs(w).sum() - 1.0) < 1e-3
    assert w[0] > w[1] and w[0] > w[2]
    assert FF.mrr(by_set["a"], w) == 1.0 > FF.mrr(by_set["a"], start)


def test_a_feature_left_out_of_the_fit_keeps_its_start_weight():
    rng = np.random.default_rng(3)
    by_set = {"a": _pools(rng, 30)}
    start = np.asarray([0.0, 0.5, 0.0])
    w = FF.fit(by_set, start, ("good", "", "noise"))
    assert w[1] == 0.5 and w[0] > 0  # the left-out "bad" signal was not refitted


def test_confidence_uses_only_its_chosen_features_and_keeps_covered_problems():
    """The confidence model is fitted on fit_confidence.USE only (the others get 0), and its
    threshold keeps COVERED_KEEP of the calibration questions' out-of-fold confidences above it."""
    import fit_confidence as FC
    from kbase.retrieval import fusion as F

    rng = np.random.default_rng(11)
    col = {f: i for i, f in enumerate(F.FEATURES)}
    w = np.zeros(len(F.FEATURES))
    w[col["bm25"]] = 1.0

    def pool(answered: bool):
        X = rng.random((8, len(F.FEATURES))) * 0.5
        rel = np.zeros(8, dtype=bool)
        if answered:  # the right entry leads clearly
            X[0, col["bm25"]] = 1.0
            rel[0] = True
        return X, rel

    covered = [pool(True) for _ in range(60)]
    uncovered = [pool(False) for _ in range(60)]
    conf = FC.fit_confidence(covered, uncovered, w)
    unused = [f for f in F.CONF_FEATURES if f not in FC.USE]
    assert unused and all(conf["coef"][f] == 0.0 for f in unused)
    assert conf["coef"]["lead"] > 0  # a clear lead is what an answered question has
    assert conf["tuning"]["covered_false"] >= FC.COVERED_KEEP
    assert conf["tuning"]["uncovered_true"] > 0.5


def test_out_of_fold_holds_a_repository_out_together():
    import fit_confidence as FC

    groups = ["a/x", "b/y", "a/x", "c/z", "b/y", "a/x"]
    folds = FC.folds_of(len(groups), groups)
    assert len({f for f, g in zip(folds, groups, strict=True) if g == "a/x"}) == 1
    assert len(set(folds)) == 3  # three repositories, three folds
    assert FC.folds_of(7, None) == [0, 1, 2, 3, 4, 0, 1]
