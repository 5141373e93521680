"""Fusion variants through the service path (the demo's default vs peer rows): one index, the reranker's weights
replaced, scores equal to the offline BundleScorer with the same weights; lexical pair scores from the templates."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from semdup.bundle import Bundle, BundleScorer
from semdup.data import load_pairs_jsonl, load_semeval_xml
from semdup.data.paths import askubuntu_files, semeval_files
from semdup.data.semeval import SemEvalSet
from semdup.evaluation.through_reranker import DENSE_ALONE, pair_accuracy_runs, semeval_rerank_runs
from semdup.measures.fitting import best_threshold, pair_accuracy

pytestmark = pytest.mark.opensearch


def _scorer(bundle_path: Path, fusion: dict[str, float]) -> BundleScorer:
    scorer = BundleScorer(Bundle.load(bundle_path))
    scorer.fusion = dict(fusion)
    return scorer


def test_semeval_variants_equal_the_offline_scorer(opensearch_client, tiny_bundle: Path) -> None:
    full = load_semeval_xml(*semeval_files("dev"), name="dev")
    sem = SemEvalSet("dev-head", full.questions[:4])
    bow_only = {"beta_bow": 1.0, "beta_dense": 0.0, "alpha": 0.0}
    runs = semeval_rerank_runs(opensearch_client, sem, tiny_bundle, {"peer": DENSE_ALONE, "bow": bow_only},
                               progress=False)
    for name, fusion in (("peer", DENSE_ALONE), ("bow", bow_only)):
        scorer = _scorer(tiny_bundle, fusion)
        for q in sem.questions:
            want = scorer.score(q.post, [r.post for r in q.related])
            got = [runs[name][q.post.id][r.post.id] for r in q.related]
            np.testing.assert_allclose(got, want, atol=1e-5)
    assert runs["peer"] != runs["bow"]


def test_pair_runs_choose_the_threshold_on_train(opensearch_client, tiny_bundle: Path) -> None:
    train_path, test_path = askubuntu_files()
    train, test = load_pairs_jsonl(train_path)[:12], load_pairs_jsonl(test_path)[:12]
    runs = pair_accuracy_runs(opensearch_client, tiny_bundle, train, test, {"peer": DENSE_ALONE},
                              lexical_models=("bm25",), progress=False)
    scorer = _scorer(tiny_bundle, DENSE_ALONE)
    tr = np.array([scorer.score(p.query, [p.candidate])[0] for p in train])
    te = np.array([scorer.score(p.query, [p.candidate])[0] for p in test])
    threshold, train_acc = best_threshold(tr, [p.duplicate for p in train])
    assert runs["peer"]["train"] == pytest.approx(train_acc)
    assert runs["peer"]["test"] == pytest.approx(pair_accuracy(te, [p.duplicate for p in test], threshold))
    assert set(runs) == {"peer", "bm25"} and 0.0 <= runs["bm25"]["test"] <= 100.0
    assert runs["bm25"]["threshold"] > 0.0  # raw BM25 scores, not the single candidate's lexnorm (always 0)

