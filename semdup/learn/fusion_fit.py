"""The hybrid default's fusion weights, chosen by a grid on the user's dev data (torch-free: numpy + onnxruntime).

    s = β_bow · cos_bow + β_dense · cos_dense + α · lexnorm + β_title · cos_title

(dos Santos et al. 2015, §3.3 for the first two terms; Das et al. 2016, §3.4 for α · lexnorm, the lexical score
min-max normalised over one query's candidates). The scale of s does not change a ranking, so β_dense is fixed
at 1 and the grid runs over β_bow, α and β_title. Each dev query is a :class:`Group`: its candidates' components,
computed exactly as the reranker computes them from the stored fields (cos_bow of the bundle's tf·idf vectors,
cosine of the unit dense vectors, the raw BM25 score, cosine of the titles' own dense vectors: a duplicate
usually asks the same thing in its title, which the body, cut at the encoder's length, dilutes). A fit that
chooses β_title = 0 writes no title weight, so its bundle indexes and answers exactly as one fitted before the
title term existed. ``measure`` turns the fused scores into the data set's
official figure (Travel MAP over the top 100, SemEval MAP, pair accuracy at the best threshold); the first best
grid point wins (the grid runs from small weights up, so ties keep the simpler model).

Example::

    groups = [Group("q1", ("a", "b"), cos_bow=np.array([0.1, 0.9]), cos_dense=np.array([0.5, 0.4]),
                    lexical=np.array([3.0, 1.0]))]
    fit = choose_fusion(groups, lambda preds: float(preds["q1"]["b"] > preds["q1"]["a"]))
    fit.fusion      # {"beta_bow": 0.2, "beta_dense": 1.0, "alpha": 0.0}: the first weights that rank b first
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from semdup.core.scoring import fused_scores, minmax_normalise
from semdup.measures.fitting import grid_search

__all__ = ["GRID_BOW", "GRID_ALPHA", "GRID_TITLE", "Group", "FusionFit", "group_scores", "choose_fusion",
           "PerQuery", "average_precisions"]

logger = logging.getLogger(__name__)

GRID_BOW = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5)
GRID_ALPHA = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5)
GRID_TITLE = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)

Predictions = dict[str, dict[str, float]]
# a group and its fused scores under G grid points [G, n] -> the group's figure at each point [G]
PerQuery = Callable[["Group", np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Group:
    """One dev query and its candidates' components, each an array [len(candidate_ids)].

    ``lexical`` is the raw lexical score (BM25, 0 where it did not match); it is min-max normalised per group,
    as the reranker normalises it over its candidate list. ``cos_title``: the title vectors' cosine (0 where
    either post has no title); None = not computed, as zeros.
    """

    query_id: str
    candidate_ids: tuple[str, ...]
    cos_bow: np.ndarray
    cos_dense: np.ndarray
    lexical: np.ndarray
    cos_title: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.candidate_ids)
        if self.cos_title is None:
            object.__setattr__(self, "cos_title", np.zeros(n))
        for name in ("cos_bow", "cos_dense", "lexical", "cos_title"):
            if np.shape(getattr(self, name)) != (n,):
                raise ValueError(f"group {self.query_id}: {name} has shape {np.shape(getattr(self, name))}, "
                                 f"expected ({n},) like its candidate ids")


@dataclass(frozen=True)
class FusionFit:
    """The chosen weights, their dev figure, and every grid point's figure (for the manifest and the report)."""

    fusion: dict[str, float]
    dev: float
    measure: str
    grid: list[tuple[float, float, float, float]] = field(repr=False)  # (beta_bow, alpha, beta_title, dev figure)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "fusion": self.fusion, "dev": self.dev, "measure": self.measure, "grid_points": len(self.grid),
            "grid_bow": sorted({g[0] for g in self.grid}), "grid_alpha": sorted({g[1] for g in self.grid})}
        titles = sorted({g[2] for g in self.grid})
        if titles != [0.0]:  # a fit without the title term keeps the record (and the bundle version) it had
            out["grid_title"] = titles
        return out


def group_scores(groups: Sequence[Group], fusion: Mapping[str, float]) -> Predictions:
    """``query id -> candidate id -> fused score`` for every group (the reranker's maths, offline)."""
    out: Predictions = {}
    for g in groups:
        s = fused_scores(g.cos_bow, g.cos_dense, minmax_normalise(g.lexical), fusion, g.cos_title)
        out[g.query_id] = dict(zip(g.candidate_ids, s.tolist(), strict=True))
    return out


def choose_fusion(
    groups: Sequence[Group],
    measure: Callable[[Predictions], float],
    measure_name: str = "MAP",
    grid_bow: Sequence[float] = GRID_BOW,
    grid_alpha: Sequence[float] = GRID_ALPHA,
    grid_title: Sequence[float] = (0.0,),
    per_query: PerQuery | None = None,
) -> FusionFit:
    """The (β_bow, α, β_title) of the grid with the highest ``measure`` on ``groups`` (β_dense = 1; first best
    wins; β_title only when ``grid_title`` offers more than 0, e.g. :data:`GRID_TITLE`).

    Args:
        groups: the dev queries (never test).
        measure: predictions -> the figure to maximise (higher is better).
        measure_name: what the figure is, for the record.
        grid_bow, grid_alpha, grid_title: the weights tried, smallest first.
        per_query: when ``measure`` is the mean of a per-query figure, that figure for every grid point at once
            (:func:`average_precisions`): the same choice, in numpy over all points instead of one Python pass
            per point (a learn run fits the grid six times; on 1,500 queries of 200 candidates each pass is
            seconds). The fused scores are the same floats as :func:`group_scores`' (the same additions in the
            same order), so the chosen point is the one ``measure`` would choose.

    Raises:
        ValueError: no groups, or an empty grid.
    """
    if not groups:
        raise ValueError("choose_fusion needs at least one dev query with candidates")
    if not grid_bow or not grid_alpha or not grid_title:
        raise ValueError("the fusion grid is empty; give at least one beta_bow, one alpha and one beta_title")
    def fusion(point: tuple[float, float, float]) -> dict[str, float]:
        beta_title, beta_bow, alpha = point
        out = {"beta_bow": float(beta_bow), "beta_dense": 1.0, "alpha": float(alpha)}
        return out | {"beta_title": float(beta_title)} if beta_title else out

    if per_query is not None:
        points = list(itertools.product(grid_title, grid_bow, grid_alpha))
        means = _grid_means(groups, np.asarray(points, dtype=np.float64), per_query)  # (G,)
        at = {point: i for i, point in enumerate(points)}
        fit = grid_search(points, lambda point: float(means[at[point]]), tolerance=1e-12)
    else:
        fit = grid_search(itertools.product(grid_title, grid_bow, grid_alpha), measure,
                          run=lambda point: group_scores(groups, fusion(point)), tolerance=1e-12)
    best_value, best_fusion = fit.value, fusion(fit.point)
    table = [(float(b), float(a), float(t), value) for (t, b, a), value in fit.table]
    logger.info("fusion grid: %d points, best %s %.2f at %s", len(table), measure_name, best_value, best_fusion)
    return FusionFit(best_fusion, best_value, measure_name, table)


def _grid_means(groups: Sequence[Group], points: np.ndarray, per_query: PerQuery) -> np.ndarray:
    """Mean per-query figure at each grid point [G] (points: rows of β_title, β_bow, α)."""
    total = np.zeros(len(points))
    for g in groups:
        lexnorm = minmax_normalise(g.lexical)
        scores = np.zeros((len(points), len(g.candidate_ids)))  # (G, n): fused_scores' additions, in its order
        scores += points[:, 1:2] * np.asarray(g.cos_bow, dtype=np.float64)
        scores += np.asarray(g.cos_dense, dtype=np.float64)
        scores += points[:, 2:3] * lexnorm
        scores += points[:, 0:1] * np.asarray(g.cos_title, dtype=np.float64)
        total += per_query(g, scores)
    return total / len(groups)


def average_precisions(scores: np.ndarray, relevant: np.ndarray, cutoff: int, n_relevant: int | None = None
                       ) -> np.ndarray:
    """Average precision (percent) of each row's ranking of one query's candidates: ``scores`` [G, n], best
    first, ties in candidate order (a stable sort, as ``sorted(..., reverse=True)``); ``relevant`` [n] bool;
    the top ``cutoff`` count; R = ``n_relevant`` (the TREC rule) or, None, the relevant found there (SemEval's),
    as :func:`semdup.measures.ranking.average_precision_at`."""
    order = np.argsort(-scores, axis=1, kind="stable")[:, :cutoff]  # (G, c)
    flags = np.asarray(relevant, dtype=bool)[order]  # (G, c)
    found = np.cumsum(flags, axis=1)  # (G, c)
    total = np.sum(np.where(flags, found / np.arange(1, flags.shape[1] + 1), 0.0), axis=1)  # (G,)
    denominator = found[:, -1] if n_relevant is None else np.full(len(scores), n_relevant)
    return np.where(denominator > 0, 100.0 * total / np.maximum(denominator, 1), 0.0)
