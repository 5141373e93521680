"""Offline evaluation of any :class:`~semdup.core.scoring.PostScorer` on the three real data sets.

Used for early stopping during training and for the README tables (through ``semdup eval``).
Torch-free: it only calls ``scorer.score`` / ``scorer.score_matrix`` and the official metrics of
:mod:`semdup.core.metrics`.

* SemEval: rerank each original question's 10 related questions; MAP/MRR/P@1/P@5 (official rules).
* Travel: rank the whole corpus (every post but the query) for each query of a split;
  Acc@1/5/10, MAP and MRR over the top 100.
* Pairs (AskUbuntu): score each pair; accuracy at a given threshold, or at the best one.

Example::

    >>> eval_travel(CheckpointScorer.from_dir("artifacts/bow-cnn-travel"), dump, "dev")
    {'Acc@1': ..., 'Acc@5': ..., 'Acc@10': ..., 'MAP': ..., 'MRR': ..., 'n_queries': 108}
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from semdup.core.metrics import best_threshold, pair_accuracy, retrieval_scores, semeval_scores
from semdup.core.scoring import PostScorer

__all__ = ["semeval_predictions", "eval_semeval", "eval_travel", "travel_rankings", "pair_scores", "eval_pairs"]

logger = logging.getLogger(__name__)


def semeval_predictions(scorer: PostScorer, semeval_set: Any) -> dict[str, dict[str, float]]:
    """orgq id → relq id → score for every (original, related) pair of the set."""
    out: dict[str, dict[str, float]] = {}
    for q in semeval_set.questions:
        cands = [r.post for r in q.related]
        scores = scorer.score(q.post, cands) if cands else np.zeros(0)
        out[q.post.id] = {r.post.id: float(s) for r, s in zip(q.related, scores, strict=True)}
    return out


def eval_semeval(scorer: PostScorer, semeval_set: Any) -> dict[str, float]:
    """Official SemEval-2016 subtask B scores (MAP, MRR, P@1, P@5, AvgRec in percent) of ``scorer``."""
    return semeval_scores(semeval_predictions(scorer, semeval_set), semeval_set.gold())


def travel_rankings(scorer: PostScorer, dump: Any, split: str, cutoff: int = 100) -> tuple[dict, dict]:
    """(query id → top ``cutoff`` corpus ids excluding the query, query id → relevant ids)."""
    queries = dump.queries(split)
    corpus = dump.corpus()
    ids = np.asarray([p.id for p in corpus])
    scores = scorer.score_matrix([q.post for q in queries], corpus)  # (Q, N)
    ranked: dict[str, list[str]] = {}
    for i, q in enumerate(queries):
        row = scores[i].copy()
        row[ids == q.post.id] = -np.inf
        top = np.argsort(-row, kind="stable")[: cutoff + 1]
        ranked[q.post.id] = [str(ids[j]) for j in top if ids[j] != q.post.id][:cutoff]
    return ranked, {q.post.id: q.relevant for q in queries}


def eval_travel(scorer: PostScorer, dump: Any, split: str) -> dict[str, float]:
    """Travel protocol scores (Acc@1/5/10, MAP, MRR over the top 100, percent) on one split."""
    ranked, relevant = travel_rankings(scorer, dump, split)
    return retrieval_scores(ranked, relevant, cutoff=100)


def pair_scores(scorer: PostScorer, pairs: Sequence[Any]) -> np.ndarray:
    """One score per ``PostPair`` (query, candidate); queries repeated across pairs are scored together."""
    out = np.zeros(len(pairs))
    by_query: dict[str, list[int]] = {}
    for i, p in enumerate(pairs):
        by_query.setdefault(p.query.id, []).append(i)
    for idx in by_query.values():
        s = scorer.score(pairs[idx[0]].query, [pairs[i].candidate for i in idx])
        out[idx] = s
    return out


def eval_pairs(scorer: PostScorer, pairs: Sequence[Any], threshold: float | None = None) -> dict[str, float]:
    """Accuracy (percent) of ``score >= threshold`` ⇔ duplicate; without a threshold, the best one on these pairs.

    Returns:
        ``{"accuracy", "threshold", "n_pairs"}``; ``"threshold_tuned_here": 1.0`` when chosen on ``pairs``.
    """
    scores = pair_scores(scorer, pairs)
    labels = [bool(p.duplicate) for p in pairs]
    if threshold is None:
        thr, acc = best_threshold(scores, labels)
        return {"accuracy": acc, "threshold": thr, "n_pairs": len(pairs), "threshold_tuned_here": 1.0}
    return {"accuracy": pair_accuracy(scores, labels, threshold), "threshold": float(threshold), "n_pairs": len(pairs)}
