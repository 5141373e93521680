"""The official quality measures: SemEval-2016 Task 3 ranking scores, retrieval scores, pair accuracy.

Pure Python/numpy, no torch, so lexical baselines and the reranker are measured without it.
Every score is returned in percent (0-100), like the published tables. Choosing a threshold or weights on these
measures (``best_threshold``, ``pair_accuracy``, grids) is :mod:`semdup.measures.fitting`'s job.

SemEval rules, taken from the official scorer (``ev.py`` + ``metrics.py`` of the SemEval-2016
Task 3 scorer) and checked by reproducing the IR baseline exactly (test MAP 74.75 / MRR 83.79,
dev 71.35 / 76.67, ``tests/unit/measures/test_ranking.py``):

* Each original question's candidates are sorted by predicted SCORE, descending, with Python's
  stable sort. The scorer reads the gold and the prediction file side by side and refuses a
  prediction file whose lines are not in the gold file's order, so **ties keep the gold file's
  order** (the search engine's rank). ``semeval_scores`` does the same with the order of ``gold``.
* Only the top 10 count. AP = mean of precision@i over the relevant candidates found in the top 10
  (the scorer divides by the relevant ones retrieved, which equals all relevant ones when a
  question has 10 candidates).
* **A question with no relevant candidate stays in the average with AP = 0, RR = 0** (the scorer's
  default; its ``--ignore_noanswer`` flag is off for the official figures: dev MAP would be 82.97
  and test 84.40 with it on).
* MRR: 1 / rank of the first relevant candidate in the top 10, else 0.
* P@k: relevant candidates in the top k divided by k, averaged over all questions (the scorer's
  ``ACC@k``).
* AvgRec: the scorer's ``avg_acc1``: for k = 1..10, relevant found in the top k summed over
  questions, divided by the sum over questions of min(k, number relevant); averaged over k.
  This is the official table's third measure (``results_subtask_B_2016.tab`` column 2).

Example::

    >>> gold = {"q1": {"a": True, "b": False}, "q2": {"c": False}}
    >>> semeval_scores({"q1": {"a": 0.1, "b": 0.9}, "q2": {"c": 1.0}}, gold)["MAP"]
    25.0
"""

from __future__ import annotations

import logging
import math
import zlib
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

__all__ = [
    "semeval_scores",
    "semeval_average_precisions",
    "complete_scores",
    "rank_semeval_candidates",
    "average_precision_at",
    "accuracy_at_k",
    "retrieval_scores",
    "retrieval_average_precisions",
    "precision_recall_f1_accuracy",
    "SEMEVAL_CUTOFF",
]

logger = logging.getLogger(__name__)

SEMEVAL_CUTOFF = 10


def _check_score(score: float, where: str) -> float:
    value = float(score)
    if math.isnan(value):
        raise ValueError(f"Score of {where} is NaN; every score must be a number (use -inf for 'not scored').")
    return value



def complete_scores(scores: Mapping[str, float], candidates: Sequence[str]) -> dict[str, float]:
    """Every candidate's score: those without one (never retrieved, or not in the index) get a score below every
    scored candidate.

    They are ordered among themselves by a hash of their id, not left tied: the official scorer breaks ties by
    the gold file's order, which is the search engine's ranking, and a method must not borrow it.
    """
    floor = (min(scores.values()) if scores else 0.0) - 1.0
    return {c: scores[c] if c in scores else floor - zlib.crc32(c.encode()) / 2.0**32 for c in candidates}

def rank_semeval_candidates(scores: Mapping[str, float], gold_row: Mapping[str, bool], orgq: str = "") -> list[bool]:
    """Order one question's gold labels by predicted score the way the official scorer does.

    Args:
        scores: relq id -> predicted score; a candidate absent here gets -inf (ranked last).
        gold_row: relq id -> relevant, in the gold file's order (the tie-break order).
        orgq: the question id, for error messages.

    Returns:
        The relevance flags of all candidates, best-scored first.

    Raises:
        ValueError: a NaN score, or a scored candidate that is not in the gold list.
    """
    extra = [r for r in scores if r not in gold_row]
    if extra:
        raise ValueError(
            f"Question {orgq}: predictions for {len(extra)} candidate(s) absent from the gold list, e.g. {extra[0]}; "
            "the official scorer only ranks the gold candidates. Score exactly the gold pairs."
        )
    keyed = [
        (_check_score(scores[r], f"({orgq}, {r})") if r in scores else -math.inf, rel) for r, rel in gold_row.items()
    ]
    keyed.sort(key=lambda item: item[0], reverse=True)  # stable: ties keep gold order, as in the scorer
    return [rel for _, rel in keyed]


def average_precision_at(flags: Sequence[bool], cutoff: int, n_relevant: int | None = None) -> float:
    """Average precision of one ranked list of relevance flags, as a fraction in [0, 1].

    AP = (1 / R) * sum over relevant ranks i <= cutoff of precision@i.

    Args:
        flags: relevance of each ranked item, best first.
        cutoff: only the first ``cutoff`` items count.
        n_relevant: R. None uses the relevant items found in the top ``cutoff`` (the SemEval
            scorer's rule); pass the total number of relevant items for the TREC rule.
    """
    found = 0
    total = 0.0
    for i, rel in enumerate(flags[:cutoff], start=1):
        if rel:
            found += 1
            total += found / i
    denominator = found if n_relevant is None else n_relevant
    return total / denominator if denominator else 0.0


def semeval_scores(
    predictions: Mapping[str, Mapping[str, float]],
    gold: Mapping[str, Mapping[str, bool]],
    cutoff: int = SEMEVAL_CUTOFF,
) -> dict[str, float]:
    """SemEval-2016 Task 3 subtask B scores of predicted scores against gold labels (official rules above).

    Args:
        predictions: orgq id -> relq id -> score (higher = more similar). Questions of
            ``predictions`` absent from ``gold`` are ignored (so one dict may cover several sets).
        gold: orgq id -> relq id -> relevant, in gold-file order (``SemEvalSet.gold()`` or
            ``load_relevancy``); every question in it counts.
        cutoff: ranks that count (10 in the official measure).

    Returns:
        ``{"MAP", "MRR", "P@1", "P@5", "AvgRec", "n_queries"}``, scores in percent.

    Raises:
        ValueError: an empty gold, a NaN score, or a prediction for a candidate not in the gold list.
    """
    if not gold:
        raise ValueError("gold is empty; pass SemEvalSet.gold() or load_relevancy(...) of the set you score.")
    missing_q = [q for q in gold if q not in predictions]
    if missing_q:
        logger.warning(
            "%d of %d questions have no prediction at all (e.g. %s); their candidates keep the gold order.",
            len(missing_q),
            len(gold),
            missing_q[0],
        )
    ap = rr = p1 = p5 = 0.0
    found_at = np.zeros(cutoff)
    possible_at = np.zeros(cutoff)
    for orgq, row in gold.items():
        flags = rank_semeval_candidates(predictions.get(orgq, {}), row, orgq)
        top = flags[:cutoff]
        ap += _semeval_ap(flags, cutoff)
        rr += next((1.0 / i for i, rel in enumerate(top, start=1) if rel), 0.0)
        p1 += sum(top[:1]) / 1
        p5 += sum(top[:5]) / 5
        n_rel = sum(flags)
        found_at += np.cumsum(np.pad(np.asarray(top, dtype=float), (0, cutoff - len(top))))
        possible_at += np.minimum(np.arange(1, cutoff + 1), n_rel)
    n = len(gold)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_k = np.where(possible_at > 0, found_at / np.maximum(possible_at, 1), 0.0)
    return {
        "MAP": 100.0 * ap / n,
        "MRR": 100.0 * rr / n,
        "P@1": 100.0 * p1 / n,
        "P@5": 100.0 * p5 / n,
        "AvgRec": 100.0 * float(per_k.mean()),
        "n_queries": n,
    }


def _semeval_ap(flags: Sequence[bool], cutoff: int) -> float:
    """One question's average precision by the scorer's rule (a fraction; 0 without a relevant candidate)."""
    return average_precision_at(flags, cutoff)


def semeval_average_precisions(
    predictions: Mapping[str, Mapping[str, float]],
    gold: Mapping[str, Mapping[str, bool]],
    cutoff: int = SEMEVAL_CUTOFF,
) -> dict[str, float]:
    """Each question's average precision (percent) by the official rules: their mean is ``semeval_scores``' MAP.

    What a paired test between two systems compares (:mod:`semdup.measures.significance`): the same questions,
    question by question.

    Args:
        predictions: orgq id -> relq id -> score, as for :func:`semeval_scores`.
        gold: orgq id -> relq id -> relevant, in gold-file order; every question in it gets a value.
        cutoff: ranks that count (10 in the official measure).

    Returns:
        orgq id -> AP in percent, in ``gold``'s order.
    """
    if not gold:
        raise ValueError("gold is empty; pass SemEvalSet.gold() or load_relevancy(...) of the set you score.")
    return {
        orgq: 100.0 * _semeval_ap(rank_semeval_candidates(predictions.get(orgq, {}), row, orgq), cutoff)
        for orgq, row in gold.items()
    }


def _ranked_flags(qid: str, docs: Sequence[str], relevant: Iterable[str]) -> list[bool]:
    """Relevance flags of one ranking, the query's own id removed (the corpus excludes it)."""
    rel = set(relevant)
    if len(set(docs)) != len(docs):
        raise ValueError(f"Query {qid}: its ranking lists a document twice; a ranking must hold each id once.")
    return [d in rel for d in docs if d != qid]


def accuracy_at_k(
    ranked: Mapping[str, Sequence[str]],
    relevant: Mapping[str, Iterable[str]],
    ks: Sequence[int] = (1, 5, 10),
) -> dict[str, float]:
    """Share of queries with at least one relevant document in the top k (BOW-CNN's Accuracy@k).

    dos Santos et al. 2015 (BOW-CNN), §4.2. The query's own id is dropped from its ranking first.

    Args:
        ranked: query id -> document ids, best first. A query absent here counts as a miss.
        relevant: query id -> relevant ids; every query here counts.
        ks: cut-offs.

    Returns:
        ``{"Acc@k": percent}`` for each k.
    """
    if not relevant:
        raise ValueError("relevant is empty; pass the queries' relevant sets (StackExchangeDump.queries).")
    hits = dict.fromkeys(ks, 0)
    for qid, rel in relevant.items():
        flags = _ranked_flags(qid, list(ranked.get(qid, ())), rel)
        for k in ks:
            hits[k] += any(flags[:k])
    return {f"Acc@{k}": 100.0 * hits[k] / len(relevant) for k in ks}


def retrieval_scores(
    ranked: Mapping[str, Sequence[str]],
    relevant: Mapping[str, Iterable[str]],
    cutoff: int = 100,
) -> dict[str, float]:
    """The Travel Stack Exchange protocol: Accuracy@1/5/10, MAP and MRR over the top ``cutoff``.

    MAP uses the TREC rule: AP divides by all relevant documents of the query, so a relevant
    post missing from the top ``cutoff`` lowers it. MRR is 1 / rank of the first relevant one
    within the cutoff, else 0. Queries absent from ``ranked`` score 0 everywhere.

    Returns:
        ``{"Acc@1", "Acc@5", "Acc@10", "MAP", "MRR", "n_queries"}``, scores in percent.
    """
    scores = accuracy_at_k(ranked, relevant, (1, 5, 10))
    ap = rr = 0.0
    absent = 0
    for qid, rel in relevant.items():
        absent += qid not in ranked
        flags, n_rel = _retrieval_flags(qid, ranked, rel, cutoff)
        ap += average_precision_at(flags, cutoff, n_relevant=n_rel)
        rr += next((1.0 / i for i, r in enumerate(flags, start=1) if r), 0.0)
    if absent:
        logger.warning("%d of %d queries have no ranking; they count as misses.", absent, len(relevant))
    n = len(relevant)
    scores.update({"MAP": 100.0 * ap / n, "MRR": 100.0 * rr / n, "n_queries": n})
    return scores


def _retrieval_flags(
    qid: str, ranked: Mapping[str, Sequence[str]], relevant: Iterable[str], cutoff: int
) -> tuple[list[bool], int]:
    """(the relevance flags of the query's top ``cutoff``, its number of relevant posts), the query itself out."""
    rel_set = set(relevant) - {qid}
    return _ranked_flags(qid, list(ranked.get(qid, ())), rel_set)[:cutoff], len(rel_set)


def retrieval_average_precisions(
    ranked: Mapping[str, Sequence[str]],
    relevant: Mapping[str, Iterable[str]],
    cutoff: int = 100,
) -> dict[str, float]:
    """Each query's average precision (percent, TREC rule) over the top ``cutoff``: their mean is
    :func:`retrieval_scores`' MAP. A query absent from ``ranked`` gets 0."""
    if not relevant:
        raise ValueError("relevant is empty; pass the queries' relevant sets (StackExchangeDump.queries).")
    out = {}
    for qid, rel in relevant.items():
        flags, n_rel = _retrieval_flags(qid, ranked, rel, cutoff)
        out[qid] = 100.0 * average_precision_at(flags, cutoff, n_relevant=n_rel)
    return out


def precision_recall_f1_accuracy(pred_bool: Sequence[bool], gold_bool: Sequence[bool]) -> dict[str, float]:
    """Precision, recall and F1 of the positive class, and accuracy, in percent.

    A ratio with a zero denominator is 0, as in the SemEval scorer.

    Returns:
        ``{"P", "R", "F1", "Acc", "n"}``.
    """
    p = np.asarray(pred_bool, dtype=bool)
    g = np.asarray(gold_bool, dtype=bool)
    if p.shape != g.shape or p.ndim != 1 or p.size == 0:
        raise ValueError(
            f"pred_bool and gold_bool must be two non-empty flat sequences of one length; found {p.shape}, {g.shape}."
        )
    tp = int(np.sum(p & g))
    precision = tp / int(p.sum()) if p.any() else 0.0
    recall = tp / int(g.sum()) if g.any() else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {
        "P": 100.0 * precision,
        "R": 100.0 * recall,
        "F1": 100.0 * f1,
        "Acc": 100.0 * float(np.mean(p == g)),
        "n": int(p.size),
    }
