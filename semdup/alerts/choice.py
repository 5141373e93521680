"""How a site's flagging is chosen on held-out posts: k (at most k flags per post), the threshold on the fused score,
and the Platt probabilities, as one :class:`~semdup.reranker.calibration.Calibration` that records its k.

The input is a streaming protocol's output (``python -m experiments.alerts_eval``): each held-out post's top
candidates ``(candidate id, fused score)``, best first, ranked against the posts created before it, and its gold
(the earlier posts a duplicate link joins it to). The choice maximises F1 of the flags over every k of
:data:`K_CHOICES` and every threshold between two scores seen (midpoints); the first best wins, so a tie keeps the
smaller k. Platt is fitted on every candidate listed (labelled by the gold). A worker flags with the calibration's
k unless ``SEMDUP_FLAG_K`` is set (:mod:`semdup.alerts.tasks`), so what was measured is what it does.

Example::

    >>> ranked = {"9": [("3", 0.9), ("4", 0.5)], "8": [("1", 0.4)]}
    >>> fit_flagging(ranked, {"9": {"3"}, "8": set()}, "toy").k
    1
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from semdup.measures.fitting import grid_search, threshold_candidates
from semdup.reranker.calibration import Calibration, fit_platt

__all__ = ["K_CHOICES", "Ranked", "flag_scores", "flags_at", "choose_on_dev", "fit_flagging"]

K_CHOICES = (1, 2, 3, 5, 10)

# post id -> its candidates (id, fused score), best first
Ranked = Mapping[str, Sequence[tuple[str, float]]]


def flag_scores(flagged: Mapping[str, set[str]], gold: Mapping[str, set[str]]) -> dict[str, float]:
    """Precision, recall, F1 (percent) of the flags ``post -> candidates`` against ``gold``, with the counts.

    Precision = flags on a gold pair / flags; recall = gold pairs flagged / gold pairs.
    """
    flags = sum(len(v) for v in flagged.values())
    pairs = sum(len(v) for v in gold.values())
    hits = sum(len(flagged.get(p, set()) & g) for p, g in gold.items())
    precision = 100.0 * hits / flags if flags else 0.0
    recall = 100.0 * hits / pairs if pairs else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "precision": precision,
        "recall": recall,
        "F1": f1,
        "posts": len(gold),
        "posts_with_earlier_duplicate": sum(1 for g in gold.values() if g),
        "gold_pairs": pairs,
        "flags": flags,
        "true_flags": hits,
        "posts_flagged": sum(1 for v in flagged.values() if v),
    }


def flags_at(ranked: Ranked, k: int, threshold: float) -> dict[str, set[str]]:
    """The flags a worker with ``k`` and ``threshold`` raises on ``ranked``: the top k at or above the threshold."""
    return {p: {c for c, s in cands[:k] if s >= threshold} for p, cands in ranked.items()}


def choose_on_dev(
    ranked: Ranked, gold: Mapping[str, set[str]], ks: Sequence[int] = K_CHOICES
) -> tuple[int, float, dict[str, float]]:
    """(k, threshold, dev scores) maximising F1 of the flags; thresholds are midpoints between the scores seen
    (:func:`semdup.measures.fitting.threshold_candidates`); the first best (k, threshold), smallest k first, wins.

    Raises:
        ValueError: no candidate at all.
    """
    scores = [s for cands in ranked.values() for _, s in cands]
    if not scores:
        raise ValueError("no held-out post has a candidate; nothing to choose a threshold on")
    grid = [(k, float(t)) for k in ks for t in threshold_candidates(scores)]
    fit = grid_search(
        grid,
        lambda flags: flag_scores(flags, gold),
        run=lambda kt: flags_at(ranked, *kt),
        metric="F1",
        tolerance=1e-12,
    )
    return fit.point[0], fit.point[1], fit.figures


def fit_flagging(
    ranked: Ranked, gold: Mapping[str, set[str]], fitted_on: str, ks: Sequence[int] = K_CHOICES
) -> Calibration:
    """The flagging calibration chosen on ``ranked`` (held-out posts, never test): k, threshold, Platt (a, b).

    Args:
        ranked: each held-out post's top candidates against the posts before it, best first.
        gold: each post's earlier duplicates (a post of ``ranked`` missing here has none).
        fitted_on: where, for the record (``Calibration.fitted_on``).

    Raises:
        ValueError: no candidate, or the candidates hold only one class (Platt needs both).
    """
    k, threshold, dev = choose_on_dev(ranked, gold, ks)
    pairs = [(s, c in gold.get(p, set())) for p, cands in ranked.items() for c, s in cands]
    platt = fit_platt([s for s, _ in pairs], [y for _, y in pairs])
    return Calibration(
        a=platt.a,
        b=platt.b,
        threshold=threshold,
        fitted_on=f"{fitted_on}; k={k} and threshold by F1 of the flags (dev P {dev['precision']:.2f}, "
        f"R {dev['recall']:.2f})",
        n=platt.n,
        positives=platt.positives,
        k=k,
    )
