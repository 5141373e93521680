"""The one fitting module: its rules, and one regression per former copy of the fitting loop.

Each ``test_former_*`` runs the new entry point the way the converted caller now does, on fixed inputs, and
checks the choice against the value the copy it replaced (on main at 1dd0c72) returned on the same input,
printed to full precision by running that code before it was deleted.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from semdup.core.scoring import fused_scores, minmax_normalise
from semdup.measures.fitting import (
    GridFit,
    best_threshold,
    grid_search,
    pair_accuracy,
    platt_scaling,
    threshold_candidates,
)
from semdup.measures.ranking import precision_recall_f1_accuracy, semeval_scores

# 40 pairs with tied scores (numpy default_rng(21), rounded to one decimal)
S = [0.8, 0.6, 0.7, 0.1, 0.6, 1.0, 0.4, 0.1, 1.0, 0.7, 0.2, 0.7, 1.0, 0.2, 0.9, 0.7, 0.2, 0.2, 1.0, 0.3, 0.4, 0.7,
     0.4, 0.0, 0.3, 0.5, 0.8, 0.6, 0.4, 0.2, 0.8, 0.2, 0.7, 0.5, 0.6, 0.4, 0.2, 0.2, 0.6, 0.3]
Y = [True, True, False, False, False, False, False, True, False, True, False, False, False, True, False, True, False,
     True, True, True, True, False, False, False, True, True, True, False, False, False, True, True, False, True,
     False, False, False, True, False, True]
S2 = [0.5, 0.5, 0.7, 0.1, 0.9, 0.3]
Y2 = [True, False, True, False, True, False]


# --- the rules ---------------------------------------------------------------------------------------------------

def test_first_keeps_the_earliest_best_and_last_the_latest() -> None:
    figure = {0: 1.0, 1: 3.0, 2: 3.0, 3: 2.0}.get
    first, last = grid_search(range(4), figure), grid_search(range(4), figure, ties="last")
    assert (first.point, first.value) == (1, 3.0) and (last.point, last.value) == (2, 3.0)
    assert first.table == [(0, 1.0), (1, 3.0), (2, 3.0), (3, 2.0)]


def test_tolerance_makes_a_rounding_difference_a_tie() -> None:
    figure = {"a": 0.3, "b": 0.1 + 0.2}.get  # 0.30000000000000004: better only by float noise
    assert grid_search("ab", figure).point == "b"
    assert grid_search("ab", figure, tolerance=1e-12).point == "a"


def test_run_and_metric_give_the_figures_at_the_chosen_point() -> None:
    fit = grid_search([1, 2, 3], lambda run: {"MAP": -abs(run - 4), "n": run}, run=lambda p: p * 2, metric="MAP")
    assert isinstance(fit, GridFit) and fit.point == 2 and fit.figures == {"MAP": 0, "n": 4} and fit.value == 0.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"ties": "best"}, "unknown tie rule"), ({"metric": None}, "name the one to maximise")],
)
def test_bad_arguments_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        grid_search([1], lambda p: {"MAP": 1.0}, **kwargs)


def test_an_empty_grid_and_a_nan_figure_are_refused() -> None:
    with pytest.raises(ValueError, match="grid is empty"):
        grid_search([], float)
    with pytest.raises(ValueError, match="NaN at grid point 2"):
        grid_search([1, 2], lambda p: math.nan if p == 2 else 1.0)


def test_threshold_candidates_split_every_way_once() -> None:
    np.testing.assert_allclose(threshold_candidates([0.5, 0.1, 0.5, 0.3]), [-0.9, 0.2, 0.4, 1.5])
    with pytest.raises(ValueError, match="no scores"):
        threshold_candidates([])


def test_f1_threshold_is_what_a_loop_over_the_candidates_finds() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 30))
        s, y = np.round(rng.random(n), 1), rng.random(n) < 0.4
        f1 = [precision_recall_f1_accuracy(s >= t, y)["F1"] for t in threshold_candidates(s)]
        t, acc = best_threshold(s, y, "f1")
        # the same candidate array, so the chosen threshold is exact; the accuracy is 100·c/n here and
        # 100·mean(hits) in pair_accuracy, two roundings of one fraction: equal within 1e-12
        assert t == threshold_candidates(s)[int(np.argmax(f1))]
        assert acc == pytest.approx(pair_accuracy(s, y, t), rel=1e-12)


def test_an_unknown_threshold_measure_is_refused() -> None:
    with pytest.raises(ValueError, match="accepted: accuracy, f1"):
        best_threshold([0.1, 0.2], [True, False], "auc")


def test_platt_needs_both_classes() -> None:
    with pytest.raises(ValueError, match="both classes"):
        platt_scaling([0.1, 0.2], [True, True])


# --- one regression per former copy ------------------------------------------------------------------------------
# The former copies' values were printed to full precision, but only their maths is the regression: a threshold is a
# midpoint of two scores and a figure a ratio of counts (a few roundings: rel 1e-12 holds them, and no grid choice
# turns on 1e-12); Platt's (a, b) come from Newton steps that stop once the gradient is below 1e-9, so their last
# digits follow the machine's exp/log (numpy's AVX-512 exp differs from its AVX2 one in the 16th digit): abs 1e-9.
CLOSE = {"rel": 1e-12, "abs": 1e-12}

def test_former_metrics_best_threshold() -> None:
    """core/measures.py best_threshold (accuracy, vectorised): now measures/fitting.best_threshold."""
    assert best_threshold(S, Y) == pytest.approx((0.75, 55.0), **CLOSE)
    assert best_threshold(S2, Y2) == pytest.approx((0.4, 83.33333333333333), **CLOSE)


def test_former_through_reranker_best_f1_threshold() -> None:
    """evaluation/through_reranker.py best_f1_threshold (a loop over the midpoints, strict >)."""
    assert best_threshold(S, Y, "f1") == pytest.approx((0.05, 47.5), **CLOSE)
    assert best_threshold(S2, Y2, "f1") == pytest.approx((0.4, 83.33333333333334), **CLOSE)
    # F1 0 everywhere: the lowest candidate
    assert best_threshold(S2, [False] * 6, "f1") == pytest.approx((-0.9, 0.0), **CLOSE)


def test_former_calibration_fit_platt() -> None:
    """reranker/calibration.py fit_platt's Newton iterations: now measures/fitting.platt_scaling."""
    # -0.5687029003937862 on AMD EPYC (AVX2) and under NPY_DISABLE_CPU_FEATURES=X86_V4: the fit's own tolerance
    assert platt_scaling(S, Y) == pytest.approx((-0.5687029003937859, 0.08687925100023518), rel=0, abs=1e-9)


# four dev queries of five candidates: (cos_bow, cos_dense, raw lexical, cos_title), numpy default_rng(7)
GROUPS = {
    "q0": ([0.63, 0.9, 0.78, 0.23, 0.3], [0.87, 0.01, 0.82, 0.8, 0.47], [3.0, 2.8, 2.5, 4.5, 5.0],
           [0.55, 1.0, 0.79, 0.62, 0.99]),
    "q1": ([0.22, 0.16, 0.61, 0.04, 0.04], [0.51, 0.47, 0.92, 0.63, 0.51], [5.0, 2.5, 0.1, 1.9, 6.9],
           [0.2, 0.37, 0.0, 0.83, 0.15]),
    "q2": ([0.27, 0.88, 0.51, 0.85, 0.64], [0.74, 0.09, 0.54, 0.51, 0.87], [3.6, 6.0, 0.6, 3.9, 3.2],
           [0.15, 0.82, 0.38, 0.98, 0.59]),
    "q3": ([0.61, 0.64, 0.68, 0.15, 0.44], [0.24, 0.4, 0.1, 0.97, 0.22], [6.7, 3.0, 8.7, 6.6, 1.3],
           [0.85, 0.94, 0.9, 0.57, 0.15]),
}
RELEVANT = {"q0": {0, 2}, "q1": {1, 3}, "q2": {2, 4}, "q3": {3, 0}}
GRID = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5)
GRID_TITLE = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)


def _fused(point: tuple[float, float, float]) -> dict[str, np.ndarray]:
    """The default fit's run: each query's candidates fused, the lexical score min-max normalised per query."""
    beta_title, beta_bow, alpha = point
    fusion = {"beta_bow": beta_bow, "beta_dense": 1.0, "alpha": alpha, "beta_title": beta_title}
    return {q: fused_scores(np.array(b), np.array(d), minmax_normalise(lex), fusion, np.array(t))
            for q, (b, d, lex, t) in GROUPS.items()}


def _mrr(run: dict[str, np.ndarray]) -> float:
    ranks = {q: [int(i) for i in np.argsort(-s, kind="stable")] for q, s in run.items()}
    hits = [next((1.0 / (r + 1) for r, i in enumerate(order) if i in RELEVANT[q]), 0.0) for q, order in ranks.items()]
    return round(100 * sum(hits) / len(hits), 6)


@pytest.mark.parametrize(
    ("titles", "point", "value", "last"),
    [((0.0,), (0.0, 0.0, 0.0), 87.5, 35.416667), (GRID_TITLE, (0.5, 0.0, 0.0), 100.0, 37.5)],
)
def test_former_default_fit_choose_fusion(titles: tuple[float, ...], point: tuple, value: float, last: float) -> None:
    """learn/fusion_fit.py choose_fusion's triple loop (first best by more than 1e-12)."""
    fit = grid_search(itertools.product(titles, GRID, GRID), _mrr, run=_fused, tolerance=1e-12)
    # exact: _mrr rounds to 6 decimals, as choose_fusion did, and an MRR of four queries of five candidates is a
    # multiple of 100/240, never within 1.6e-7 of a 6-decimal rounding edge; the ranks come from products and
    # sums of the same floats in the same order (correctly rounded on every IEEE-754 machine)
    assert (fit.point, fit.value) == (point, value)
    assert len(fit.table) == 81 * len(titles) and fit.table[-1] == ((titles[-1], 1.5, 1.5), last)


def test_former_fusion_choice_best_dense_scale() -> None:
    """training/fusion_choice.py best_dense_scale (increasing scales, ``>=``: ties to the larger scale)."""
    maps = {0.0: 50.0, 0.25: 61.0, 0.5: 61.25, 1.0: 61.25, 1.5: 60.0}
    scales = sorted({1.5, 0.0, 1.0, 0.5, 0.25})
    fit = grid_search(scales, lambda s: {"MAP": maps[s], "MRR": s}, metric="MAP", ties="last")
    assert (fit.point, fit.figures, dict(fit.table)) == (1.0, {"MAP": 61.25, "MRR": 1.0}, maps)


# six SemEval-like questions of ten candidates: (cosines, min-max lexical), gold flags; numpy default_rng(3)
COMPS = [
    ([0.09, 0.24, 0.8, 0.58, 0.09, 0.43, 0.48, 0.16, 0.73, 0.11],
     [0.39, 0.52, 0.43, 0.59, 0.74, 0.96, 0.28, 0.65, 0.7, 0.29],
     '1010000010'),
    ([0.37, 0.09, 0.66, 0.93, 0.21, 0.63, 0.3, 0.74, 0.72, 0.22],
     [0.83, 0.66, 0.68, 0.82, 0.43, 0.76, 0.88, 0.1, 0.85, 0.39],
     '0101010001'),
    ([0.18, 0.75, 0.75, 0.57, 0.92, 0.21, 0.85, 0.17, 0.96, 0.62],
     [0.61, 0.97, 0.79, 0.79, 0.05, 0.37, 0.08, 0.19, 0.21, 0.86],
     '1100001001'),
    ([0.68, 0.37, 0.59, 0.67, 0.67, 0.52, 0.55, 0.2, 0.5, 0.13],
     [0.48, 0.54, 0.77, 0.39, 0.02, 0.53, 0.21, 0.74, 0.39, 0.38],
     '0000010000'),
    ([0.95, 0.84, 0.74, 0.81, 0.82, 0.25, 0.48, 0.34, 0.26, 0.57],
     [0.32, 0.62, 0.58, 0.1, 0.44, 0.39, 0.71, 0.09, 0.17, 0.51],
     '0001011101'),
    ([0.54, 0.94, 0.13, 0.42, 0.67, 0.88, 1.0, 0.14, 0.54, 0.88],
     [0.05, 0.59, 0.17, 0.77, 0.94, 0.54, 0.01, 0.06, 0.42, 0.85],
     '1001000000'),
]
ALPHA_GRID = tuple(round(a * 0.05, 2) for a in range(21))


def test_former_tscqa_tune_alpha() -> None:
    """experiments/tscqa_fit.py tune_alpha's ``max(ALPHA_GRID, key=(curve[a], a))``: the best α, ties to the larger."""
    gold = {f"o{q}": {f"o{q}r{i}": flag == "1" for i, flag in enumerate(flags)}
            for q, (_, _, flags) in enumerate(COMPS)}

    def semeval_map(a: float) -> dict[str, float]:
        fused = [a * np.asarray(cos) + (1.0 - a) * np.asarray(lex) for cos, lex, _ in COMPS]  # Das et al. eq. 3
        preds = {f"o{q}": {f"o{q}r{i}": float(s) for i, s in enumerate(scores)} for q, scores in enumerate(fused)}
        return semeval_scores(preds, gold)

    fit = grid_search(ALPHA_GRID, semeval_map, metric="MAP", ties="last")
    assert fit.point == 0.15 and fit.value == pytest.approx(49.04761904761906, **CLOSE)
    tied = {a: round(a * (1 - a), 1) for a in ALPHA_GRID}
    assert grid_search(ALPHA_GRID, tied.get, ties="last").point == 0.8
