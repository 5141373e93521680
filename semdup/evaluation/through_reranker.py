"""Quality figures through the reranker itself: retrieval runs, candidate recall and duplicate decisions.

Every figure here goes through :class:`~semdup.reranker.Reranker` on a fresh index filled by the indexer's
own :func:`semdup.indexer.batch_writer.index_batch`, so the numbers are the service's, not an offline model's:

* :func:`semeval_predictions` / :func:`stackexchange_ranking`: what ``semdup eval semeval|stackexchange
  --method bundle:PATH`` report.
* :func:`candidate_recall`: the share of relevant posts among the merged candidates, per candidate set
  (BM25 alone; bm25+lmj+dfr+ib; + learned sparse; + k-NN).
* :func:`semeval_decisions` / :func:`askubuntu_decisions`: P/R/F1/Acc with the threshold chosen on dev
  (SemEval) or train (AskUbuntu), and the Platt calibration fitted on the same pairs.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from semdup.bundle.bundle import Bundle
from semdup.core import progress as progress_bar
from semdup.core.errors import BulkWriteError
from semdup.core.posts import Post
from semdup.core.scoring import check_fusion
from semdup.index_format.layout import Shape
from semdup.index_format.schema import CandidateFields
from semdup.indexer.batch_writer import ensure_index_model, index_batch
from semdup.ingest.lexical_index import create_index, delete_index
from semdup.measures.fitting import THRESHOLD_MEASURES, best_threshold, pair_accuracy
from semdup.measures.ranking import complete_scores, precision_recall_f1_accuracy
from semdup.reranker.calibration import Calibration, calibration_path, fit_decision, save_calibration
from semdup.reranker.fusion import compute_fused
from semdup.reranker.reranker import Reranker
from semdup.reranker.settings import RerankerSettings
from semdup.reranker.sources import lexical_scores
from semdup.search_templates import query_text, register_templates

__all__ = [
    "CANDIDATE_SETS",
    "DENSE_ALONE",
    "rank_queries",
    "semeval_rerank_runs",
    "pair_accuracy_runs",
    "semantic_index",
    "semeval_predictions",
    "stackexchange_ranking",
    "candidate_recall",
    "DecisionRun",
    "CRITERIA",
    "semeval_decisions",
    "askubuntu_decisions",
]

logger = logging.getLogger(__name__)

# name -> RerankerSettings changes; "sparse" needs a bag-of-words bundle, "knn" a dense one
CANDIDATE_SETS: dict[str, dict[str, Any]] = {
    "bm25": {"templates": ("bm25",)},
    "bm25+knn": {"templates": ("bm25",), "knn": True},
    "bm25+lmj+dfr+ib": {"templates": ("bm25", "lmj", "dfr", "ib")},
    "+sparse": {"templates": ("bm25", "lmj", "dfr", "ib"), "sparse": True},
    "+knn": {"templates": ("bm25", "lmj", "dfr", "ib"), "knn": True},
    "+sparse+knn": {"templates": ("bm25", "lmj", "dfr", "ib"), "sparse": True, "knn": True},
}


# the peer (OpenSearch neural search's ranking): cosine of the stored dense vectors alone
DENSE_ALONE = {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.0}


def _index_name(stem: str) -> str:
    return f"semdup-rr-{re.sub('[^a-z0-9]+', '-', stem.lower()).strip('-')[:32]}-{uuid.uuid4().hex[:8]}"


@contextmanager
def semantic_index(
    client: Any,
    bundle: Bundle,
    posts: Sequence[Post],
    stem: str,
    *,
    keep: bool = False,
    progress: bool = True,
    batch: int = 64,
    search: CandidateFields | None = None,
    shape: Shape | None = None,
) -> Iterator[str]:
    """A fresh index holding ``posts`` with lexical and semdup fields (``index_batch``), dropped afterwards.

    ``search``: its search structures; by default every one the bundle and cluster allow (learned-sparse with a
    BOW model, k-NN when the cluster has the plugin), so every candidate path can be measured. ``shape``: its
    shards and replicas (default one shard: the figures do not depend on how documents fall on shards).
    """
    name = _index_name(stem)
    if search is None:
        plugins = {p.get("component") for p in client.cat.plugins(format="json", request_timeout=30)}
        knn = "opensearch-knn" in plugins and bundle.dimension is not None
        search = CandidateFields(sparse=bundle.term_weights is not None, knn=knn)
    create_index(client, name, dimension=bundle.dimension, knn=search.knn, sparse=search.sparse, shape=shape)
    try:
        search = ensure_index_model(client, name, bundle.version)
        register_templates(client)
        failed: list[tuple[str, str]] = []
        unique = list({p.id: p for p in posts}.values())
        for start in progress_bar.progress(range(0, len(unique), batch), desc=f"indexing {name}", enabled=progress):
            chunk = unique[start : start + batch]
            result = index_batch(client, name, [p.to_json() for p in chunk], bundle, search=search)
            failed.extend(result.failed)
        client.indices.refresh(index=name, request_timeout=60)
        if failed:
            raise BulkWriteError(
                f"{len(failed)} of {len(unique)} posts were not indexed into {name!r} (first: {failed[0]})", failed
            )
        logger.info("indexed %d posts into %s (%s)", len(unique), name, search.describe())
        yield name
    finally:
        if not keep:
            delete_index(client, name)


def _reranker(bundle: Bundle, client: Any, index: str, fusion: Mapping[str, float] | None = None,
              **settings: Any) -> Reranker:
    """A reranker over ``index``; ``fusion`` replaces the bundle's weights (e.g. :data:`DENSE_ALONE`, the peer).

    The candidate paths are the caller's: k-NN only when asked (``knn=True``), not the service's ``auto``, so a
    measured configuration (candidate recall's ``bm25`` row, a ranking with ``knn=False``) is what it says."""
    settings.setdefault("knn", False)
    rr = Reranker(bundle, client, index, RerankerSettings(**settings))
    if fusion is not None:
        rr.fusion = check_fusion(fusion)
    return rr


def rank_queries(
    client: Any,
    bundle: Bundle,
    index: str,
    queries: Sequence[Any],
    fusions: Mapping[str, Mapping[str, float] | None],
    top: int,
    *,
    progress: bool = True,
    **settings: Any,
) -> dict[str, dict[str, list[tuple[str, float]]]]:
    """Per fusion name: ``query id -> [(post id, score)]`` (top ``top``) from the reranker over an indexed corpus.

    ``fusions`` maps a name to weights (None: the bundle's own); every variant reads the same stored fields.
    """
    out = {}
    for name, fusion in fusions.items():
        rr = _reranker(bundle, client, index, fusion, k_candidates=top, **settings)
        out[name] = {q.post.id: [(c.id, c.score) for c in rr.rank(q.post, k=top, exclude_id=q.post.id)]
                     for q in progress_bar.progress(queries, desc=f"reranking ({name})", enabled=progress)}
    return out


def semeval_rerank_runs(
    client: Any,
    sem: Any,
    bundle_path: str | Path,
    fusions: Mapping[str, Mapping[str, float] | None],
    *,
    progress: bool = True,
) -> dict[str, dict[str, dict[str, float]]]:
    """Per fusion name: ``orgq -> relq -> score``, each question's 10 candidates ranked by the reranker (one index)."""
    bundle = Bundle.load(bundle_path)
    out: dict[str, dict[str, dict[str, float]]] = {}
    with semantic_index(client, bundle, sem.related_posts(), sem.name, progress=progress) as index:
        for name, fusion in fusions.items():
            rr = _reranker(bundle, client, index, fusion, k_candidates=10)
            preds = out.setdefault(name, {})
            for q in progress_bar.progress(sem.questions, desc=f"reranking {sem.name} ({name})", enabled=progress):
                ids = [r.post.id for r in q.related]
                ranked = {c.id: c.score for c in rr.rank(q.post, k=len(ids), restrict_ids=ids)}
                preds[q.post.id] = complete_scores(ranked, ids)  # as `semdup eval semeval`: no gold-order ties
    return out


def _pair_components(rr: Reranker, pairs: Sequence[Any], progress: bool) -> list[dict[str, float | None]]:
    """Each pair's candidate ranked alone (``restrict_ids``): its components, to fuse under any weights."""
    return [rr.rank(p.query, k=1, restrict_ids=[p.candidate.id])[0].components
            for p in progress_bar.progress(pairs, desc="pairs", enabled=progress)]


def _lexical_pair_scores(client: Any, index: str, pairs: Sequence[Any], model: str, timeout: float) -> np.ndarray:
    """The stored template's raw score of each pair's candidate (0 = no match), the call the reranker makes."""
    return np.asarray([
        lexical_scores(client, index, query_text(p.query.title, p.query.body), [p.candidate.id], model=model,
                           variant="text", timeout=timeout).get(p.candidate.id, 0.0)
        for p in pairs
    ])


def _accuracies(train_scores: np.ndarray, test_scores: np.ndarray, train: Sequence[Any],
                test: Sequence[Any], threshold: float | None = None) -> dict[str, float]:
    if threshold is None:
        threshold, train_acc = best_threshold(train_scores, [p.duplicate for p in train])
    else:
        train_acc = pair_accuracy(train_scores, [p.duplicate for p in train], threshold)
    return {"train": train_acc, "test": pair_accuracy(test_scores, [p.duplicate for p in test], threshold),
            "threshold": float(threshold)}


def pair_accuracy_runs(
    client: Any,
    bundle_path: str | Path,
    train: Sequence[Any],
    test: Sequence[Any],
    fusions: Mapping[str, Mapping[str, float] | None],
    *,
    lexical_models: Sequence[str] = (),
    progress: bool = True,
    threshold: float | None = None,
) -> dict[str, dict[str, float]]:
    """Per fusion name (then per lexical model): pair accuracy on train at the threshold chosen there, and on test.
    ``threshold``: the fusions' threshold instead of one chosen on train (a learned bundle's own, chosen out of
    fold: its train pairs are ones it learned from).

    Each pair's candidate is ranked alone (``restrict_ids``), as :func:`askubuntu_decisions` does, once, in one
    index; each variant fuses the candidate's components (:func:`semdup.reranker.fusion.compute_fused`, lexnorm of
    one candidate is 0). A lexical model's score is its stored template's raw score of the candidate.
    """
    bundle = Bundle.load(bundle_path)
    seen: dict[str, Post] = {}
    for p in [*train, *test]:
        seen.setdefault(p.candidate.id, p.candidate)
    out = {}
    with semantic_index(client, bundle, list(seen.values()), "pairs", progress=progress) as index:
        rr = _reranker(bundle, client, index, k_candidates=1)
        comps = {name: _pair_components(rr, pairs, progress) for name, pairs in (("train", train), ("test", test))}
        for name, fusion in fusions.items():
            weights = check_fusion(bundle.fusion if fusion is None else fusion)
            tr, te = (np.asarray([compute_fused(_as_arrays(c), weights)[0][0] for c in comps[split]])
                      for split in ("train", "test"))
            out[name] = _accuracies(tr, te, train, test, threshold)
        for model in lexical_models:
            tr, te = (_lexical_pair_scores(client, index, pairs, model, rr.settings.search_timeout)
                      for pairs in (train, test))
            out[model] = _accuracies(tr, te, train, test)
    return out


def _as_arrays(components: Mapping[str, float | None]) -> dict[str, np.ndarray]:
    """One candidate's components as compute_fused's [1] arrays (None = missing = NaN; lexnorm of one is 0; a
    title cosine absent is 0, as the reranker counts it)."""
    out = {k: np.asarray([np.nan if components.get(k) is None else components[k]], dtype=np.float64)
           for k in ("cos_bow", "cos_dense", "lexical", "lexnorm")}
    out["cos_title"] = np.asarray([components.get("cos_title") or 0.0], dtype=np.float64)
    return out


def semeval_predictions(
    client: Any,
    sem: Any,
    bundle_path: str | Path,
    mode: str,
    variant: str,
    k: int,
    *,
    keep_index: bool = False,
    progress: bool = True,
) -> tuple[dict[str, dict[str, float]], float | None]:
    """``orgq -> relq -> score`` through the reranker; gold candidates it did not return get a floor
    (:func:`~semdup.measures.ranking.complete_scores`).

    ``rerank``: each question's 10 candidates exactly (``restrict_ids``); ``retrieve``: the top ``k`` BM25
    candidates among all of the set's related questions.
    """
    bundle = Bundle.load(bundle_path)
    with semantic_index(client, bundle, sem.related_posts(), sem.name, keep=keep_index, progress=progress) as index:
        rr = _reranker(bundle, client, index, variant=variant, k_candidates=k)
        preds: dict[str, dict[str, float]] = {}
        for q in progress_bar.progress(sem.questions, desc=f"reranking {sem.name}", enabled=progress):
            ids = [r.post.id for r in q.related]
            if mode == "rerank":
                cands = rr.rank(q.post, k=len(ids), restrict_ids=ids)
            else:
                cands = rr.rank(q.post, k=k)
            wanted = set(ids)
            preds[q.post.id] = complete_scores({c.id: c.score for c in cands if c.id in wanted}, ids)
    return preds, rr.threshold


def stackexchange_ranking(
    client: Any,
    queries: Sequence[Any],
    corpus: Sequence[Post],
    bundle_path: str | Path,
    variant: str,
    top: int,
    *,
    keep_index: bool = False,
    progress: bool = True,
) -> dict[str, list[tuple[str, float]]]:
    """``query id -> [(post id, score)]`` (top ``top``): BM25's ``top`` candidates reranked by the bundle."""
    bundle = Bundle.load(bundle_path)
    with semantic_index(client, bundle, corpus, "stackexchange", keep=keep_index, progress=progress) as index:
        rr = _reranker(bundle, client, index, variant=variant, k_candidates=top)
        return {
            q.post.id: [(c.id, c.score) for c in rr.rank(q.post, k=top, exclude_id=q.post.id)]
            for q in progress_bar.progress(queries, desc="reranking queries", enabled=progress)
        }


def candidate_recall(
    client: Any,
    bundle: Bundle,
    index: str,
    queries: Sequence[tuple[Post, set[str], str | None]],
    k: int,
    sets: Sequence[str] = tuple(CANDIDATE_SETS),
    variant: str = "text",
    progress: bool = True,
) -> dict[str, dict[str, float]]:
    """Per candidate set: micro recall (relevant found / relevant), mean candidates per query, queries.

    Args:
        queries: (query post, its relevant post ids, id to exclude) triples.
        k: candidates per retrieval path.
    """
    out: dict[str, dict[str, float]] = {}
    for name in sets:
        changes = CANDIDATE_SETS[name]
        if changes.get("sparse") and bundle.term_weights is None:
            logger.info("candidate set %s skipped: bundle %s has no learned term weights", name, bundle.version)
            continue
        rr = _reranker(bundle, client, index, variant=variant, k_candidates=k, **changes)
        found = total = n_cands = 0
        for post, relevant, exclude in progress_bar.progress(queries, desc=f"candidates {name}", enabled=progress):
            cands, _ = rr.retrieve(post, exclude_id=exclude)
            got = set(cands.ids)
            found += len(relevant & got)
            total += len(relevant)
            n_cands += len(got)
        out[name] = {
            "recall": 100.0 * found / max(total, 1),
            "candidates": n_cands / max(len(queries), 1),
            "relevant": total,
            "queries": len(queries),
        }
    return out


@dataclass
class DecisionRun:
    """Duplicate decisions on test with the threshold (and calibration) chosen on dev/train."""

    data: str
    model: str
    threshold: float
    dev_accuracy: float
    test: dict[str, float]
    calibration: Calibration
    calibration_file: Path | None


CRITERIA = THRESHOLD_MEASURES


def _fit(scores: np.ndarray, labels: np.ndarray, fitted_on: str, criterion: str = "accuracy") -> Calibration:
    if criterion not in CRITERIA:
        raise ValueError(f"unknown threshold criterion {criterion!r}; accepted: {', '.join(CRITERIA)}")
    return fit_decision(scores, labels, f"{fitted_on}, threshold by {criterion}", criterion)


def _semeval_pair_scores(client: Any, bundle: Bundle, sem: Any, progress: bool) -> tuple[np.ndarray, np.ndarray]:
    scores, labels = [], []
    with semantic_index(client, bundle, sem.related_posts(), sem.name, progress=progress) as index:
        rr = _reranker(bundle, client, index, k_candidates=10)
        for q in progress_bar.progress(sem.questions, desc=f"deciding {sem.name}", enabled=progress):
            ids = [r.post.id for r in q.related]
            by_id = {c.id: c.score for c in rr.rank(q.post, k=len(ids), restrict_ids=ids)}
            for r in q.related:
                scores.append(by_id[r.post.id])
                labels.append(bool(r.relevant))
    return np.asarray(scores), np.asarray(labels)


def semeval_decisions(
    client: Any,
    bundle_path: str | Path,
    dev: Any,
    test: Any,
    *,
    save: bool = True,
    progress: bool = True,
    criterion: str = "accuracy",
) -> DecisionRun:
    """SemEval-2016 subtask B decisions: threshold and Platt fitted on dev, P/R/F1/Acc on test (rerank mode)."""
    bundle = Bundle.load(bundle_path)
    dev_s, dev_y = _semeval_pair_scores(client, bundle, dev, progress)
    cal = _fit(dev_s, dev_y, f"SemEval-2016 {dev.name} ({len(dev_s)} pairs, rerank mode)", criterion)
    test_s, test_y = _semeval_pair_scores(client, bundle, test, progress)
    metrics = precision_recall_f1_accuracy(test_s >= cal.threshold, test_y)
    path = save_calibration(calibration_path(bundle_path), bundle.version, cal) if save else None
    return DecisionRun("semeval", bundle.version, float(cal.threshold), float(cal.dev_accuracy), metrics, cal, path)


def askubuntu_decisions(
    client: Any,
    bundle_path: str | Path,
    train: Sequence[Any],
    test: Sequence[Any],
    *,
    save: bool = True,
    progress: bool = True,
    criterion: str = "accuracy",
) -> DecisionRun:
    """AskUbuntu pairs: each pair's candidate ranked alone (``restrict_ids``), threshold on train, Acc on test."""
    bundle = Bundle.load(bundle_path)
    posts = [p.candidate for p in [*train, *test]]
    seen: dict[str, Post] = {}
    for p in posts:
        if p.id in seen and seen[p.id] != p:
            logger.warning("AskUbuntu candidate %s occurs with two texts; the first is indexed", p.id)
        seen.setdefault(p.id, p)

    def scores(index: str, pairs: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        rr = _reranker(bundle, client, index, k_candidates=1)
        out = []
        for pair in progress_bar.progress(pairs, desc="deciding pairs", enabled=progress):
            cands = rr.rank(pair.query, k=1, restrict_ids=[pair.candidate.id])
            out.append(cands[0].score)
        return np.asarray(out), np.asarray([p.duplicate for p in pairs])

    with semantic_index(client, bundle, list(seen.values()), "askubuntu", progress=progress) as index:
        tr_s, tr_y = scores(index, train)
        cal = _fit(tr_s, tr_y, f"AskUbuntu train ({len(tr_s)} pairs)", criterion)
        te_s, te_y = scores(index, test)
    metrics = precision_recall_f1_accuracy(te_s >= cal.threshold, te_y)
    metrics["Acc_check"] = pair_accuracy(te_s, te_y, cal.threshold)
    path = save_calibration(calibration_path(bundle_path), bundle.version, cal) if save else None
    return DecisionRun("askubuntu", bundle.version, float(cal.threshold), float(cal.dev_accuracy), metrics, cal, path)
