"""Choose the weight of the dense path on dev: β_dense scaled by the factor that scores best there.

BOW-CNN learns β_bow and β_dense from the training margin against a few sampled negatives; what
serving needs is the weight that ranks a whole corpus best. On Travel the two differ: the CNN
fits the 1,570 training groups and a learned β_dense lets it outvote the bag of words. So at
each dev evaluation the trainer also tries β_dense × s for a few scales s (``dense_scales``)
and keeps the best (checkpoint, s) pair; the saved checkpoint holds β_dense × s, so serving and
export need nothing new. The posts are encoded once per evaluation (memoised), so each extra
scale costs only the ranking, not the encoder. Choosing s on dev is a hyper-parameter choice
like the early-stopping epoch; test is never looked at.

Example::

    best, figures = best_dense_scale(CheckpointScorer(model, pipeline), evaluate_dev, "MAP", (0, 0.25, 1))
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from semdup.core.posts import Post
from semdup.measures.fitting import grid_search
from semdup.training.checkpoint import CheckpointScorer

__all__ = ["MemoisedScorer", "best_dense_scale"]

logger = logging.getLogger(__name__)


class MemoisedScorer(CheckpointScorer):
    """A :class:`CheckpointScorer` that encodes each distinct list of posts once (its fusion may change)."""

    def __init__(self, base: CheckpointScorer) -> None:
        super().__init__(base.model, base.pipeline, base.config, batch_size=base.batch_size, progress=base.progress)
        self._memo: dict[tuple[str, ...], tuple[Any, Any]] = {}

    def encode(self, posts: Sequence[Post]) -> tuple[Any, Any]:
        key = tuple(p.id for p in posts)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = super().encode(posts)
        return got


def best_dense_scale(
    scorer: CheckpointScorer,
    evaluate: Callable[[CheckpointScorer], Mapping[str, float]],
    metric: str,
    scales: Sequence[float],
) -> tuple[float, dict[str, float], dict[float, float]]:
    """(best scale s, dev figures at s, metric per scale) for β_dense × s; ties go to the larger s
    (:func:`semdup.measures.fitting.grid_search`, ``ties="last"`` over the scales in increasing order).

    Ties favour the larger scale so that a checkpoint whose CNN does not change the ranking keeps
    its learned weight rather than dropping the path.
    """
    memo = MemoisedScorer(scorer)
    base = dict(memo.fusion)

    def scaled(s: float) -> MemoisedScorer:
        memo.fusion = {**base, "beta_dense": base["beta_dense"] * s}
        return memo

    fit = grid_search(sorted(set(float(x) for x in scales)), lambda m: dict(evaluate(m)), run=scaled, metric=metric,
                      ties="last")
    per_scale = dict(fit.table)
    logger.info("dense scale on dev: %s -> best %g (%s %.2f)", per_scale, fit.point, metric, fit.value)
    return fit.point, fit.figures, per_scale
