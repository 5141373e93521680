"""The evaluation protocols of the three real data sets, the one implementation every figure goes through.

Used for early stopping during training, by ``semdup eval`` and by every script under ``experiments/``.
Torch-free: it only calls ``scorer.score`` / ``scorer.score_matrix`` (or takes their output) and the
official measures of :mod:`semdup.measures.ranking`.

* SemEval: rerank each original question's 10 related questions; MAP/MRR/P@1/P@5 (official rules:
  ties keep the gold file's order).
* Travel: rank the whole corpus (every post but the query) for each query of a split;
  Acc@1/5/10, MAP and MRR over the top 100. :func:`rank_corpus` is the one ranking: ties keep
  corpus order.
* Pairs (AskUbuntu): score each pair; accuracy at a given threshold, or at the best one.

The ``*_scores`` / ``rank_corpus`` functions take scores computed elsewhere (a cached embedding
matrix, a fusion of several features), so experiments measure exactly as training and ``semdup eval`` do.

Example::

    >>> eval_travel(CheckpointScorer.from_dir("artifacts/bow-cnn-travel"), dump, "dev")
    {'Acc@1': ..., 'Acc@5': ..., 'Acc@10': ..., 'MAP': ..., 'MRR': ..., 'n_queries': 108}
    >>> travel_scores(query_vectors @ corpus_vectors.T, dump.queries("dev"), [p.id for p in dump.corpus()])
    {'Acc@1': ..., ...}
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from semdup.core.scoring import PostScorer
from semdup.measures.fitting import best_threshold, pair_accuracy
from semdup.measures.ranking import retrieval_scores, semeval_scores

__all__ = [
    "TRAVEL_CUTOFF",
    "semeval_predictions",
    "semeval_pair_scores",
    "eval_semeval",
    "rank_corpus",
    "travel_scores",
    "travel_rankings",
    "eval_travel",
    "pair_scores",
    "eval_pair_scores",
    "eval_pairs",
]

logger = logging.getLogger(__name__)

TRAVEL_CUTOFF = 100


# ---------------------------------------------------------------- SemEval


def semeval_predictions(scorer: PostScorer, semeval_set: Any) -> dict[str, dict[str, float]]:
    """orgq id → relq id → score for every (original, related) pair of the set."""
    out: dict[str, dict[str, float]] = {}
    for q in semeval_set.questions:
        cands = [r.post for r in q.related]
        scores = scorer.score(q.post, cands) if cands else np.zeros(0)
        out[q.post.id] = {r.post.id: float(s) for r, s in zip(q.related, scores, strict=True)}
    return out


def semeval_pair_scores(semeval_set: Any, scores: Iterable[tuple[tuple[str, str], float]]) -> dict[str, float]:
    """Official SemEval-2016 subtask B scores of scores computed elsewhere.

    Args:
        semeval_set: the ``SemEvalSet`` whose gold labels (and gold order, the tie-break) count.
        scores: ``((orgq id, relq id), score)`` items, e.g. ``dict.items()`` or ``zip(keys, vector)``.

    Returns:
        What :func:`~semdup.measures.ranking.semeval_scores` returns (MAP, MRR, P@1, P@5, AvgRec in percent).
    """
    predictions: dict[str, dict[str, float]] = {}
    for (orgq, relq), score in scores:
        predictions.setdefault(orgq, {})[relq] = float(score)
    return semeval_scores(predictions, semeval_set.gold())


def eval_semeval(scorer: PostScorer, semeval_set: Any) -> dict[str, float]:
    """Official SemEval-2016 subtask B scores (MAP, MRR, P@1, P@5, AvgRec in percent) of ``scorer``."""
    return semeval_scores(semeval_predictions(scorer, semeval_set), semeval_set.gold())


# ---------------------------------------------------------------- Travel (retrieval over a whole community)


def rank_corpus(
    scores: np.ndarray, query_ids: Sequence[str], corpus_ids: Sequence[str], cutoff: int = TRAVEL_CUTOFF
) -> dict[str, list[tuple[str, float]]]:
    """Each query's top ``cutoff`` corpus posts, best first, the query itself never among them.

    Ties keep corpus order (a stable sort), so the ranking does not depend on the sort algorithm.

    Args:
        scores: [len(query_ids), len(corpus_ids)], higher = more similar; any float dtype.
        query_ids: the queries' post ids, one per row; a query need not be in the corpus.
        corpus_ids: the corpus post ids, one per column.
        cutoff: documents kept per query.

    Returns:
        query id → ``(doc id, score)`` pairs, best first.

    Raises:
        ValueError: a score matrix whose shape does not match the ids, or NaN scores.
    """
    matrix = np.asarray(scores, dtype=np.float64)
    if matrix.shape != (len(query_ids), len(corpus_ids)):
        raise ValueError(
            f"scores have shape {matrix.shape}; expected (queries, corpus) = ({len(query_ids)}, {len(corpus_ids)})."
        )
    if np.isnan(matrix).any():
        raise ValueError("scores hold NaN; every (query, post) pair needs a number (use -inf for 'not scored').")
    ids = list(corpus_ids)
    column = {pid: j for j, pid in enumerate(ids)}
    ranked: dict[str, list[tuple[str, float]]] = {}
    for i, qid in enumerate(query_ids):
        row = matrix[i]
        own = column.get(qid)
        order = np.argsort(-row, kind="stable")[: cutoff + 1]
        ranked[qid] = [(ids[j], float(row[j])) for j in order if j != own][:cutoff]
    return ranked


def travel_scores(
    scores: np.ndarray, queries: Sequence[Any], corpus_ids: Sequence[str], cutoff: int = TRAVEL_CUTOFF
) -> dict[str, float]:
    """Travel protocol scores (Acc@1/5/10, MAP, MRR over the top ``cutoff``, percent) of a (Q, N) score matrix.

    Args:
        scores: [len(queries), len(corpus_ids)], e.g. query vectors @ corpus vectors.T.
        queries: ``RetrievalQuery`` items (``.post.id``, ``.relevant``), one per row.
        corpus_ids: the corpus post ids, one per column.
    """
    ranked = rank_corpus(scores, [q.post.id for q in queries], corpus_ids, cutoff)
    return retrieval_scores(
        {q: [d for d, _ in hits] for q, hits in ranked.items()}, {q.post.id: q.relevant for q in queries}, cutoff
    )


def travel_rankings(scorer: PostScorer, dump: Any, split: str, cutoff: int = TRAVEL_CUTOFF) -> tuple[dict, dict]:
    """(query id → top ``cutoff`` corpus ids excluding the query, query id → relevant ids)."""
    queries = dump.queries(split)
    corpus = dump.corpus()
    scores = scorer.score_matrix([q.post for q in queries], corpus)  # (Q, N)
    ranked = rank_corpus(scores, [q.post.id for q in queries], [p.id for p in corpus], cutoff)
    return {q: [d for d, _ in hits] for q, hits in ranked.items()}, {q.post.id: q.relevant for q in queries}


def eval_travel(scorer: PostScorer, dump: Any, split: str) -> dict[str, float]:
    """Travel protocol scores (Acc@1/5/10, MAP, MRR over the top 100, percent) on one split."""
    ranked, relevant = travel_rankings(scorer, dump, split)
    return retrieval_scores(ranked, relevant, cutoff=TRAVEL_CUTOFF)


# ---------------------------------------------------------------- pairs (AskUbuntu)


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


def eval_pair_scores(
    scores: Sequence[float], labels: Sequence[bool], threshold: float | None = None
) -> dict[str, float]:
    """Accuracy (percent) of ``score >= threshold`` ⇔ duplicate; without a threshold, the best one on these pairs.

    Returns:
        ``{"accuracy", "threshold", "n_pairs"}``; ``"threshold_tuned_here": 1.0`` when chosen on these pairs
        (choose on train or dev, then pass the threshold for test).
    """
    labels = [bool(y) for y in labels]
    if threshold is None:
        thr, acc = best_threshold(scores, labels)
        return {"accuracy": acc, "threshold": thr, "n_pairs": len(labels), "threshold_tuned_here": 1.0}
    accuracy = pair_accuracy(scores, labels, threshold)
    return {"accuracy": accuracy, "threshold": float(threshold), "n_pairs": len(labels)}


def eval_pairs(scorer: PostScorer, pairs: Sequence[Any], threshold: float | None = None) -> dict[str, float]:
    """:func:`eval_pair_scores` of ``scorer`` on ``PostPair`` items."""
    return eval_pair_scores(pair_scores(scorer, pairs), [p.duplicate for p in pairs], threshold)
