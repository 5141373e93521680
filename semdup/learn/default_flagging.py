"""The hybrid default's flagging calibration, chosen offline on a dump's dev split in the streaming protocol, so a
worker on a freshly fitted default flags with no extra step (``SEMDUP_FLAG_DUPLICATES=1``, issue #20).

Protocol (``python -m experiments.alerts_eval``'s, offline): posts arrive in creation order (id order), so a
dev post's candidates are only the posts created before it; its gold is the earlier posts a duplicate link joins it
to; every post of the split is flagged (:class:`EveryPost`: also those that are only the target of a link, whose
flags can only be wrong). :func:`semdup.learn.default_bundle.fit_default` builds their candidates and score
components over the whole corpus as it does for the fusion (:class:`~semdup.learn.fusion_fit.Group`: BM25 and
k-NN top ``k`` each); here each group keeps its earlier candidates only, is fused with the chosen weights (the
lexical score min-max normalised over what is left, as the reranker does over its list), and its top :data:`TOP` go to
:func:`semdup.alerts.choice.fit_flagging` (k, threshold, Platt).

Approximations against the real stream, said in ``fitted_on``: BM25 statistics are the whole corpus's (the live
index holds only the earlier posts), and the candidates are the earlier ones among the whole corpus's top ``k``
per path (the live index's top ``k`` among earlier posts can reach further down).

    every = EveryPost(dump)
    groups = dev_groups(base, pipeline, idf, FitData(..., dev=(every, "dev")), ...)[0]   # the fit's own groups
    cal = flagging_calibration(groups, fit.fusion, every, "dev")
    save_flagging(out_dir, bundle.version, cal)   # <out_dir>.calibration.json, where the workers look
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from semdup.alerts.choice import fit_flagging
from semdup.data.stackexchange import RetrievalQuery
from semdup.learn.fusion_fit import Group, group_scores
from semdup.reranker.calibration import Calibration, calibration_path, save_calibration

__all__ = ["TOP", "EveryPost", "earlier_groups", "flagging_calibration", "save_flagging"]

logger = logging.getLogger(__name__)

TOP = 10  # candidates per post the choice looks at (alerts_eval's)


def _created_before(candidate: str, post: str) -> bool:
    """Stack Exchange numbers posts as they are created, so id order is creation order."""
    return int(candidate) < int(post)


class EveryPost:
    """A dump seen through the streaming protocol: the queries of a split are all its posts there, in creation
    order, each with its duplicates (the dump's own ``queries`` holds only the posts that link to another)."""

    def __init__(self, dump: Any) -> None:
        self.dump = dump

    def corpus(self) -> list[Any]:
        return self.dump.corpus()

    def duplicates_of(self, post_id: str) -> frozenset[str]:
        return self.dump.duplicates_of(post_id)

    def queries(self, split: str) -> list[RetrievalQuery]:
        ids = sorted((p for p, s in self.dump.splits.items() if s == split and p in self.dump.posts), key=int)
        return [RetrievalQuery(self.dump.posts[p], self.dump.duplicates_of(p)) for p in ids]


def earlier_groups(groups: Sequence[Group]) -> list[Group]:
    """Each group with only the candidates created before its query (a query with none keeps an empty group)."""
    out = []
    for g in groups:
        keep = np.asarray([i for i, c in enumerate(g.candidate_ids) if _created_before(c, g.query_id)], dtype=np.int64)
        out.append(
            replace(
                g,
                candidate_ids=tuple(g.candidate_ids[i] for i in keep),
                cos_bow=g.cos_bow[keep],
                cos_dense=g.cos_dense[keep],
                lexical=g.lexical[keep],
                cos_title=None if g.cos_title is None else g.cos_title[keep],
            )
        )
    return out


def flagging_calibration(
    groups: Sequence[Group], fusion: Mapping[str, float], dump: Any, split: str = "dev"
) -> Calibration | None:
    """k, threshold and Platt chosen on ``groups`` (``dump``'s ``split`` queries, never test) streamed offline;
    None, with a warning, when the split cannot give one (no earlier candidate, or no earlier duplicate among
    them): the bundle is still written, and flagging then needs ``semdup calibrate``."""
    streamed = earlier_groups(groups)
    preds = group_scores([g for g in streamed if g.candidate_ids], fusion)
    ranked = {g.query_id: sorted(preds.get(g.query_id, {}).items(), key=lambda cs: -cs[1])[:TOP] for g in streamed}
    gold = {q: {d for d in dump.duplicates_of(q) if _created_before(d, q)} for q in ranked}
    try:
        cal = fit_flagging(
            ranked,
            gold,
            f"{split} split streamed offline in creation order: {len(ranked)} posts, each against the earlier "
            f"posts among its candidates (whole-corpus BM25 statistics), top {TOP}",
        )
    except ValueError as exc:
        logger.warning("no flagging calibration from the %s split (%s); fit one with `semdup calibrate`", split, exc)
        return None
    logger.info("flagging calibration: k=%s threshold %.4f (%s)", cal.k, cal.threshold, cal.fitted_on)
    return cal


def save_flagging(bundle_dir: str | Path, version: str, calibration: Calibration | None) -> Path | None:
    """Write ``calibration`` as bundle ``version``'s entry of ``<bundle_dir>.calibration.json`` (where the workers
    look: :func:`semdup.reranker.calibration.calibration_path`); None (pair or SemEval data): nothing, None."""
    if calibration is None:
        return None
    return save_calibration(calibration_path(bundle_dir), version, calibration)
