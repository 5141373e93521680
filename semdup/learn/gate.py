"""The gate: may a newly learned bundle replace the current one? Judged query by query on labels it never saw.

Both systems score the same labelled queries the way the reranker does (:func:`semdup.learn.default_bundle.
dev_groups`: BM25 ∪ k-NN candidates for a dump, the labelled candidates for a rerank set, each pair for pairs),
each query gets one figure (average precision; for pairs, 100 if the pair is classified right, else 0), and a
paired randomisation test (:mod:`semdup.measures.significance`) asks whether the new system's mean is above the
current one's by more than chance. The gate accepts only when the evidence is clear on both counts: one-sided
p < ``alpha`` **and** the bootstrap 95 % interval of the gain lies wholly above ``min_gain`` (0 by default). A
p just under 0.05 whose interval still reaches zero is a coin toss an operator would rather not ship: on a
medical set whose test split was written by other authors, a candidate accepted at p = 0.032 with an interval of
−0.02..+1.40 out of fold scored 0.58 MAP below the default it replaced (issue #33). Where learning does not
clearly help, the current bundle stays.

A fusion (or a threshold) fitted on the queries it is judged on would flatter itself; so figures are
**cross-fitted** (:func:`cross_fitted_figures`): each fold's queries are scored with the fusion (and, for pairs,
the threshold) chosen on the other folds, the same folds the encoders were trained without
(:mod:`semdup.data.learn_folds`). A bundle the operator runs is scored with the fusion it ships with.

Example::

    current = per_query_figures(groups_now, bundle_now.fusion, data)
    candidate, fusions = cross_fitted_figures(groups_new, data, fold_of)
    decision = gate(current, candidate, metric="MAP")
    decision.accept, decision.line()   # (True, "accept: MAP <current> -> <candidate> (<gain>, 95% CI ..), p=.., ..")
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from semdup.learn.default_bundle import TOP, FitData
from semdup.learn.fusion_fit import GRID_TITLE, Group, PerQuery, average_precisions, choose_fusion, group_scores
from semdup.measures.fitting import best_threshold
from semdup.measures.ranking import SEMEVAL_CUTOFF, retrieval_average_precisions, semeval_average_precisions
from semdup.measures.significance import TEST_NAME, PairedTest, paired_randomisation_test

__all__ = ["GateDecision", "per_query_figures", "figures_from_predictions", "ranked_figure", "cross_fitted_figures",
           "gate", "DEFAULT_ALPHA"]

logger = logging.getLogger(__name__)

DEFAULT_ALPHA = 0.05


def _labels(data: FitData) -> Any:
    if data.kind == "retrieval":
        dump, split = data.dev
        return {q.post.id: set(q.relevant) for q in dump.queries(split)}
    if data.kind == "semeval":
        return data.dev.gold()
    return [p.duplicate for p in data.dev]


def ranked_figure(data: FitData) -> PerQuery | None:
    """The per-query figure of ranked data at many fusions at once (:func:`semdup.learn.fusion_fit.choose_fusion`'s
    ``per_query``), the same as :func:`figures_from_predictions` gives one fusion at a time: SemEval's AP over
    its 10 candidates (ties in gold order), a dump's AP over the top 100 (TREC rule). None for pairs (their
    figure hangs on a threshold fitted over every pair)."""
    if data.kind == "pairs":
        return None
    labels = _labels(data)
    if data.kind == "semeval":
        def semeval(g: Group, scores: np.ndarray) -> np.ndarray:
            row = labels[g.query_id]
            return average_precisions(scores, np.array([row[c] for c in g.candidate_ids]), SEMEVAL_CUTOFF)

        return semeval

    def retrieval(g: Group, scores: np.ndarray) -> np.ndarray:
        rel = set(labels[g.query_id]) - {g.query_id}
        return average_precisions(scores, np.array([c in rel for c in g.candidate_ids]), TOP, len(rel))

    return retrieval


def figures_from_predictions(preds: Mapping[str, Mapping[str, float]], groups: Sequence[Group], data: FitData,
                             threshold: float | None) -> dict[str, float]:
    """query id -> figure of fused scores ``preds`` (see :func:`per_query_figures`)."""
    labels = _labels(data)
    if data.kind == "pairs":
        y = [labels[int(g.query_id)] for g in groups]
        s = np.asarray([next(iter(preds[g.query_id].values())) for g in groups])
        thr = best_threshold(s, y)[0] if threshold is None else threshold
        return {g.query_id: 100.0 * float((si >= thr) == yi) for g, si, yi in zip(groups, s, y, strict=True)}
    if data.kind == "semeval":
        return semeval_average_precisions(preds, {g.query_id: labels[g.query_id] for g in groups})
    ranked = {g.query_id: sorted(preds[g.query_id], key=preds[g.query_id].__getitem__, reverse=True)[:TOP]
              for g in groups}
    return retrieval_average_precisions(ranked, {g.query_id: labels[g.query_id] for g in groups}, cutoff=TOP)


def per_query_figures(groups: Sequence[Group], fusion: Mapping[str, float], data: FitData,
                      threshold: float | None = None) -> dict[str, float]:
    """query id -> its figure under ``fusion`` (percent): AP for ``retrieval`` (top 100) and ``semeval``; for
    ``pairs`` (query id = the pair's index) 100 or 0 at ``threshold`` (None: the best one on these pairs).
    ``groups`` come from :func:`~semdup.learn.default_bundle.dev_groups` over ``data``."""
    return figures_from_predictions(group_scores(groups, fusion), groups, data, threshold)


def cross_fitted_figures(
    groups: Sequence[Group], data: FitData, fold_of: Mapping[str, int], grid_title: Sequence[float] = GRID_TITLE,
    grid: tuple[Sequence[float], Sequence[float]] | None = None,
    fixed: Mapping[int, Mapping[str, float]] | None = None,
) -> tuple[dict[str, float], dict[int, dict[str, float]]]:
    """(query id -> figure under the fusion chosen on the other folds, fold -> the fusion used on it).

    Each fold's fusion maximises the mean figure of the other folds (their MAP; for pairs, the accuracy at the
    best threshold there, and that threshold is applied to the fold). A one-point grid (``grid=((0.0,), (0.0,))``,
    ``grid_title=(0.0,)``) fixes the fusion and cross-fits only the pairs' threshold; ``fixed`` gives each fold's
    fusion outright (fold -> fusion: another system's fusions carried over) and cross-fits only the threshold.

    Args:
        groups: the labelled queries' groups.
        data: their labels.
        fold_of: query id -> fold (two folds or more).
        grid_title, grid: the fusion grid (:func:`semdup.learn.fusion_fit.choose_fusion`).
        fixed: fold -> the fusion to score it with, instead of a grid (every fold present must be named).

    Raises:
        ValueError: fewer than two folds among the groups, or a fold missing from ``fixed``.
    """
    folds = sorted({fold_of[g.query_id] for g in groups})
    if len(folds) < 2:
        raise ValueError(f"cross-fitting needs queries in at least 2 folds; got {len(folds)}")
    if fixed is not None and set(folds) - set(fixed):
        raise ValueError(f"no fusion given for fold(s) {sorted(set(folds) - set(fixed))}")
    kwargs: dict[str, Any] = {"grid_title": tuple(grid_title)}
    if grid is not None:
        kwargs |= {"grid_bow": grid[0], "grid_alpha": grid[1]}
    out: dict[str, float] = {}
    chosen: dict[int, dict[str, float]] = {}
    for f in folds:
        fit_on = [g for g in groups if fold_of[g.query_id] != f]
        score_on = [g for g in groups if fold_of[g.query_id] == f]
        if not fit_on or not score_on:
            continue
        def measure(preds: Mapping[str, Mapping[str, float]], gs: Sequence[Group] = fit_on) -> float:
            return float(np.mean(list(figures_from_predictions(preds, gs, data, None).values())))

        fusion = dict(fixed[f]) if fixed is not None else choose_fusion(
            fit_on, measure, "fold", per_query=ranked_figure(data), **kwargs).fusion
        chosen[f] = fusion
        threshold = None
        if data.kind == "pairs":
            labels = _labels(data)
            preds = group_scores(fit_on, fusion)
            threshold = best_threshold([next(iter(preds[g.query_id].values())) for g in fit_on],
                                       [labels[int(g.query_id)] for g in fit_on])[0]
        out.update(per_query_figures(score_on, fusion, data, threshold))
    return {g.query_id: out[g.query_id] for g in groups if g.query_id in out}, chosen


@dataclass(frozen=True)
class GateDecision:
    """Accept or keep, with the paired test it rests on and the rule it applied (``rule()``)."""

    accept: bool
    metric: str
    alpha: float
    test: PairedTest
    min_gain: float = 0.0

    def rule(self) -> str:
        """The acceptance rule, in words."""
        return f"accept only at p < {self.alpha:g} with the gain's 95% interval above {self.min_gain:+g}"

    @property
    def reason(self) -> str:
        t = self.test
        if self.accept:
            return (f"the new bundle is better on {t.n} held-out queries (p = {t.p_value:.4f} < {self.alpha}, "
                    f"95% interval from {t.ci_low:+.2f})")
        if t.mean_difference <= 0:
            return f"the new bundle is not better on {t.n} held-out queries (mean difference {t.mean_difference:+.2f})"
        if t.p_value >= self.alpha:
            return (f"the gain ({t.mean_difference:+.2f}) on {t.n} held-out queries is within chance "
                    f"(p = {t.p_value:.4f} >= {self.alpha})")
        return (f"the gain ({t.mean_difference:+.2f}, p = {t.p_value:.4f}) on {t.n} held-out queries is not clear: "
                f"its 95% interval reaches {t.ci_low:+.2f}, not above {self.min_gain:+g}")

    def line(self) -> str:
        t = self.test
        verdict = "accept" if self.accept else "keep the current bundle"
        return (f"{verdict}: {self.metric} {t.mean_a:.2f} -> {t.mean_b:.2f} ({t.mean_difference:+.2f}, 95% CI "
                f"{t.ci_low:+.2f}..{t.ci_high:+.2f}), p={t.p_value:.4f}, {t.wins} better / {t.losses} worse / "
                f"{t.ties} tied queries; {self.reason}")

    def to_json(self) -> dict[str, Any]:
        return {"accept": self.accept, "metric": self.metric, "alpha": self.alpha, "min_gain": self.min_gain,
                "rule": self.rule(), "reason": self.reason, "test": self.test.to_json()}


def gate(current: Mapping[str, float], candidate: Mapping[str, float], metric: str,
         alpha: float = DEFAULT_ALPHA, seed: int = 0, min_gain: float = 0.0) -> GateDecision:
    """Decide on the queries both were scored on (see the module doc; the test is :data:`TEST_NAME`): accept when
    p < ``alpha`` and the gain's 95 % interval lies above ``min_gain`` (in the figure's points).

    Raises:
        ValueError: no query in common, or ``alpha`` outside (0, 1).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1); got {alpha}")
    common = [q for q in current if q in candidate]
    if not common:
        raise ValueError("the two bundles were scored on no common held-out query")
    test = paired_randomisation_test([current[q] for q in common], [candidate[q] for q in common], seed=seed)
    clear = test.p_value < alpha and test.mean_difference > 0 and test.ci_low > min_gain
    decision = GateDecision(clear, metric, alpha, test, min_gain)
    logger.info("gate (%s): %s", TEST_NAME, decision.line())
    return decision
