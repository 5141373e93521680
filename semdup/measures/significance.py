"""Is system B better than system A on the same queries? A paired randomisation test and a bootstrap interval.

Two systems scored on the same held-out queries give two per-query figures (average precision, or 1/0 for a pair
classified right); the question is whether the mean of the differences d_i = b_i − a_i is more than chance.
Under the null hypothesis the two systems are exchangeable on each query, so the sign of each d_i is a coin flip:

    p = P( mean(s_i · d_i) >= mean(d_i) ),  s_i ∈ {−1, +1} uniform          (one-sided, B better)

estimated from ``n_resamples`` random sign vectors (Fisher's randomisation test; recommended for IR by Smucker,
Allan & Carterette, *A Comparison of Statistical Significance Tests for Information Retrieval Evaluation*, CIKM
2007). The 95 % interval of the mean difference is a percentile bootstrap over queries (Efron & Tibshirani 1993,
§13). Both are seeded, so a decision repeats. Small sets say little: on 50 queries whose per-query differences
have a standard deviation of 10 AP points, a mean gain of 2 points is about 1.4 standard errors (p ≈ 0.08).

Example::

    >>> t = paired_randomisation_test([50.0, 60.0, 70.0, 80.0], [60.0, 70.0, 80.0, 90.0])
    >>> t.mean_difference, t.wins, t.losses, round(t.p_value, 3)
    (10.0, 4, 0, 0.062)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["PairedTest", "paired_randomisation_test", "TEST_NAME"]

logger = logging.getLogger(__name__)

TEST_NAME = "paired randomisation test (sign flips, one-sided) with a bootstrap 95% interval"


@dataclass(frozen=True)
class PairedTest:
    """The outcome of comparing B with A query by query (differences are B − A, in the figures' unit).

    Attributes:
        n: queries compared.
        mean_a, mean_b: the two systems' mean figures.
        mean_difference: mean of b_i − a_i (= mean_b − mean_a).
        p_value: one-sided p of "B is better" under the randomisation null (the observed sign vector counted).
        ci_low, ci_high: percentile bootstrap 95 % interval of the mean difference.
        wins, losses, ties: queries where B is above, below, equal to A.
        n_resamples: sign vectors and bootstrap samples drawn.
    """

    n: int
    mean_a: float
    mean_b: float
    mean_difference: float
    p_value: float
    ci_low: float
    ci_high: float
    wins: int
    losses: int
    ties: int
    n_resamples: int

    def to_json(self) -> dict[str, float | int | str]:
        return {**asdict(self), "test": TEST_NAME}


def paired_randomisation_test(
    a: Sequence[float], b: Sequence[float], n_resamples: int = 10000, seed: int = 0
) -> PairedTest:
    """Compare per-query figures ``b`` with ``a`` (same queries, same order); see the module doc.

    Args:
        a: the current system's figure per query.
        b: the new system's figure per query.
        n_resamples: random sign vectors (and bootstrap samples); the p-value's resolution is 1 / (n_resamples + 1).
        seed: the generator's seed.

    Raises:
        ValueError: different lengths, no query, NaN figures or ``n_resamples`` < 1.
    """
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or x.size == 0:
        raise ValueError(f"a and b must be two non-empty flat sequences of one length; found {x.shape} and {y.shape}")
    if np.isnan(x).any() or np.isnan(y).any():
        raise ValueError("the per-query figures hold NaN; every query needs a number for both systems")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1; got {n_resamples}")
    d = y - x  # (n,)
    observed = float(d.mean())
    rng = np.random.default_rng(seed)
    signs = rng.integers(0, 2, size=(n_resamples, d.size)) * 2 - 1  # (R, n) in {-1, +1}
    null = (signs * d).mean(axis=1)  # (R,)
    # the observed assignment is one of the equally likely ones: count it (never p = 0)
    p = (1.0 + float(np.sum(null >= observed - 1e-12))) / (n_resamples + 1.0)
    boot = d[rng.integers(0, d.size, size=(n_resamples, d.size))].mean(axis=1)  # (R,)
    low, high = np.percentile(boot, [2.5, 97.5])
    return PairedTest(
        n=int(d.size),
        mean_a=float(x.mean()),
        mean_b=float(y.mean()),
        mean_difference=observed,
        p_value=p,
        ci_low=float(low),
        ci_high=float(high),
        wins=int(np.sum(d > 0)),
        losses=int(np.sum(d < 0)),
        ties=int(np.sum(d == 0)),
        n_resamples=int(n_resamples),
    )
