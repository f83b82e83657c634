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
