"""The one fitting code: a grid search over choices, threshold selection, and Platt scaling (numpy, no torch).

Every choice semdup makes on dev data goes through here: the hybrid default's fusion weights
(``semdup.learn.fusion_fit.choose_fusion``), the dense-path scale at each dev evaluation
(``semdup.training.fusion_choice.best_dense_scale``), T-SCQA's α (``experiments.tscqa_fit.tune_alpha``),
the shingle size, the alerts' (k, threshold), and every decision threshold and calibration
(``semdup.reranker.calibration``, ``semdup.review.calibrate``, ``semdup.evaluation.through_reranker``). One copy
means one set of rules, so a figure chosen in training, in export and at a site is chosen the same way:

* :func:`grid_search` tries the points of a grid **in the order given**. A point's *run* is what the data gives
  under that point (e.g. every dev query's candidates fused with the point's weights, the lexical score min-max
  normalised per query); its *measure* turns the run into the figure to maximise (the data set's official
  figure, or a dict of figures and the ``metric`` to read). Ties are broken by position, never by float noise:
  ``ties="first"`` keeps the earliest best (grids run from simple to complex, so a tie keeps the simpler model),
  and ``tolerance`` makes a later point beat the best only by more than that (the fusion grid uses 1e-12, so a
  rounding difference does not count as better); ``ties="last"`` takes the latest of the best (T-SCQA's larger
  α, the larger dense scale: a tie keeps the learned model's own part).
* :func:`best_threshold` chooses the decision threshold of ``score >= threshold`` ⇔ duplicate on labelled pairs,
  by accuracy (the AskUbuntu protocol, the calibration's default) or by F1 of the duplicate class. The
  candidates (:func:`threshold_candidates`) are the midpoints between adjacent distinct scores, plus one point
  1.0 below the lowest (all duplicate) and one 1.0 above the highest (none duplicate); the lowest of the best
  wins. The search is vectorised (one pass over the sorted scores), with the same arithmetic as the measures in
  :mod:`semdup.measures.ranking`, so the threshold is the one a loop over the candidates would find, to the digit.
* :func:`platt_scaling` fits P(duplicate | s) = 1 / (1 + exp(-(a·s + b))) (Platt 1999, §2.2, with the smoothed
  targets; Newton's method with a backtracking line search, as Lin, Lin & Weng 2007 advise);
  :class:`semdup.reranker.calibration.Calibration` stores it beside a bundle.

Example::

    >>> fit = grid_search([0.0, 0.5, 1.0], lambda a: {0.0: 1.0, 0.5: 2.0, 1.0: 2.0}[a], ties="last")
    >>> (fit.point, fit.value)
    (1.0, 2.0)
    >>> best_threshold([0.1, 0.2, 0.8, 0.9], [False, False, True, True])
    (0.5, 100.0)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

__all__ = [
    "TIES",
    "THRESHOLD_MEASURES",
    "GridFit",
    "grid_search",
    "threshold_candidates",
    "best_threshold",
    "pair_accuracy",
    "platt_scaling",
]

P = TypeVar("P")

TIES = ("first", "last")
THRESHOLD_MEASURES = ("accuracy", "f1")


@dataclass(frozen=True)
class GridFit(Generic[P]):
    """The chosen point, its figure, what its measure returned, and every point's figure in grid order."""

    point: P
    value: float
    figures: Any  # the measure's whole answer at the chosen point (a float, or a dict of figures)
    table: list[tuple[P, float]] = field(repr=False)


def grid_search(
    grid: Iterable[P],
    measure: Callable[[Any], float | Mapping[str, float]],
    *,
    run: Callable[[P], Any] | None = None,
    metric: str | None = None,
    ties: str = "first",
    tolerance: float = 0.0,
) -> GridFit[P]:
    """The point of ``grid`` whose run scores highest under ``measure`` (module doc for the tie rules).

    Args:
        grid: the points, in the order that decides ties (e.g. weights from small to large).
        measure: a run -> the figure to maximise (higher is better), or a mapping of figures read at ``metric``.
        run: a point -> its run (the data fused under the point, normalised as the service does); None: the
            measure takes the point itself.
        metric: the key of the figure to maximise when ``measure`` returns a mapping.
        ties: ``"first"``: a later point replaces the best only when its figure is above best + ``tolerance``;
            ``"last"``: when it is at least best - ``tolerance``.
        tolerance: how much better (``"first"``) or how little worse (``"last"``) still counts as a tie.

    Raises:
        ValueError: an empty grid, an unknown ``ties``, a mapping without ``metric``, or a NaN figure (a
            measure must give a number at every point; NaN would silently never, or always, win).
    """
    if ties not in TIES:
        raise ValueError(f"unknown tie rule {ties!r}; accepted: {', '.join(TIES)}")
    best: tuple[P, float, Any] | None = None
    table: list[tuple[P, float]] = []
    for point in grid:
        figures = measure(run(point) if run is not None else point)
        if isinstance(figures, Mapping):
            if metric is None or metric not in figures:
                raise ValueError(f"the measure gave figures {sorted(figures)}; name the one to maximise (metric=)")
            value = float(figures[metric])
        else:
            value = float(figures)
        if math.isnan(value):
            raise ValueError(f"the measure gave NaN at grid point {point!r}; every point needs a number")
        table.append((point, value))
        if best is None:
            best = (point, value, figures)
        elif (value > best[1] + tolerance) if ties == "first" else (value >= best[1] - tolerance):
            best = (point, value, figures)
    if best is None:
        raise ValueError("the grid is empty; give at least one point to choose from")
    return GridFit(best[0], best[1], best[2], table)


def _as_arrays(scores: Sequence[float], labels: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=bool)
    if s.shape != y.shape or s.ndim != 1:
        raise ValueError(f"scores and labels must be two flat sequences of one length; found {s.shape} and {y.shape}.")
    if s.size == 0:
        raise ValueError("scores and labels are empty; pass at least one pair.")
    if np.isnan(s).any():
        raise ValueError("scores hold NaN; every pair needs a number.")
    return s, y


def pair_accuracy(scores: Sequence[float], labels: Sequence[bool], threshold: float) -> float:
    """Percent of pairs classified right when ``score >= threshold`` means duplicate."""
    s, y = _as_arrays(scores, labels)
    return 100.0 * float(np.mean((s >= threshold) == y))


def threshold_candidates(scores: Sequence[float]) -> np.ndarray:
    """Sorted candidate thresholds: 1.0 below the lowest score, the midpoints of adjacent distinct scores, 1.0
    above the highest; every way to split the pairs by ``score >= t`` is reached by exactly one of them."""
    values = np.unique(np.asarray(scores, dtype=float))  # sorted, distinct
    if values.size == 0:
        raise ValueError("no scores to place a threshold between; pass at least one pair.")
    return np.concatenate([[values[0] - 1.0], (values[:-1] + values[1:]) / 2.0, [values[-1] + 1.0]])


def best_threshold(scores: Sequence[float], labels: Sequence[bool], measure: str = "accuracy") -> tuple[float, float]:
    """The decision threshold that maximises ``measure`` (``"accuracy"`` or ``"f1"`` of the duplicate class) on
    these (train or dev) pairs; the lowest candidate of the best wins.

    Returns:
        ``(threshold, accuracy in percent at it)``, whatever the measure; apply it with :func:`pair_accuracy`
        on test.

    Raises:
        ValueError: an unknown measure, empty or unequal inputs, a NaN score.
    """
    if measure not in THRESHOLD_MEASURES:
        raise ValueError(f"unknown threshold measure {measure!r}; accepted: {', '.join(THRESHOLD_MEASURES)}")
    s, y = _as_arrays(scores, labels)
    candidates = threshold_candidates(s)
    order = np.argsort(s, kind="stable")
    s_sorted, y_sorted = s[order], y[order]
    # for each candidate t: pairs below t are predicted non-duplicate, pairs at or above it duplicate
    below = np.searchsorted(s_sorted, candidates, side="left")
    n_pos = int(y.sum())
    neg_below = np.concatenate([[0], np.cumsum(~y_sorted)])[below]
    pos_at_or_above = n_pos - np.concatenate([[0], np.cumsum(y_sorted)])[below]
    correct = neg_below + pos_at_or_above
    if measure == "accuracy":
        best = int(np.argmax(correct))  # first maximum: the lowest threshold of the best
        return float(candidates[best]), 100.0 * float(correct[best]) / s.size
    # F1 as precision_recall_f1_accuracy computes it (P = tp/flagged, R = tp/positives, 2PR/(P+R), a zero
    # denominator giving 0), so equal F1s compare equal and the lowest of them wins as a loop would choose
    flagged = s.size - below
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(flagged > 0, pos_at_or_above / np.maximum(flagged, 1), 0.0)
        recall = pos_at_or_above / n_pos if n_pos else np.zeros(candidates.size)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
    best = int(np.argmax(100.0 * f1))
    threshold = float(candidates[best])
    return threshold, pair_accuracy(s, y, threshold)


def platt_scaling(scores: Sequence[float], labels: Sequence[bool], max_iter: int = 100) -> tuple[float, float]:
    """(a, b) of P(duplicate | s) = 1 / (1 + exp(-(a·s + b))), fitted on held-out pairs (module doc).

    Raises:
        ValueError: fewer than two pairs, or only one class.
    """
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    if s.shape != y.shape or s.ndim != 1 or s.size < 2:
        raise ValueError(f"need two flat arrays of one length (>= 2 pairs); found {s.shape} and {y.shape}")
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"Platt scaling needs both classes; found {n_pos} duplicates and {n_neg} non-duplicates")
    t = np.where(y, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))  # smoothed targets [N]

    def loss(a_: float, b_: float) -> float:
        z = a_ * s + b_
        return float(np.sum(np.logaddexp(0.0, z) - t * z))  # -log-likelihood of p = sigmoid(z)

    a, b = 0.0, float(np.log((n_pos + 1.0) / (n_neg + 1.0)))
    current = loss(a, b)
    for _ in range(max_iter):
        p = 1.0 / (1.0 + np.exp(-np.clip(a * s + b, -500, 500)))  # [N]
        g = p - t  # d loss / d z  [N]
        grad = np.array([np.sum(g * s), np.sum(g)])
        if np.max(np.abs(grad)) < 1e-9:
            break
        w = p * (1.0 - p)
        hess = np.array([[np.sum(w * s * s), np.sum(w * s)], [np.sum(w * s), np.sum(w)]]) + 1e-10 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        lr = 1.0
        while lr > 1e-10:
            na, nb = a - lr * step[0], b - lr * step[1]
            new = loss(na, nb)
            if new <= current - 1e-4 * lr * float(grad @ step):
                break
            lr /= 2.0
        if lr <= 1e-10:
            break
        a, b, current = na, nb, new
    return float(a), float(b)
