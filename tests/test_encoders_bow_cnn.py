"""BOW-CNN: the logistic loss on hand-built scores, and a tiny real training run that learns."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch

from semdup.encoders.checkpoint import CheckpointScorer
from semdup.encoders.losses.bow_cnn_logistic import BowCNNLogisticLoss, compute_logistic_loss_from_scores
from semdup.encoders.training.offline_eval import eval_semeval
from semdup.encoders.training.pairs import semeval_training_data
from semdup.encoders.training.trainer import TrainSettings, train

DATA = Path("/work/shared/data/semeval2016-task3/official")


def test_logistic_loss_uses_the_hardest_negative() -> None:
    scores = torch.tensor([[0.9, 0.1, 0.5], [0.2, 0.4, 0.0]])
    got = compute_logistic_loss_from_scores(scores, gamma=10.0)
    expected = (math.log1p(math.exp(-10 * (0.9 - 0.5))) + math.log1p(math.exp(-10 * (0.2 - 0.4)))) / 2
    assert got.item() == pytest.approx(expected, rel=1e-5)
    scores.requires_grad_(True)
    BowCNNLogisticLoss(gamma=10.0)(scores).backward()
    assert scores.grad[0, 1] == 0 and scores.grad[0, 2] > 0 and scores.grad[0, 0] < 0  # only the hardest moves


def test_logistic_loss_falls_as_the_margin_grows() -> None:
    small = compute_logistic_loss_from_scores(torch.tensor([[0.5, 0.4]]), 10.0)
    large = compute_logistic_loss_from_scores(torch.tensor([[0.9, 0.0]]), 10.0)
    assert large < small


def random_semeval_map(semeval_set, repeats: int = 200, seed: int = 0) -> float:
    """Expected MAP of a random ranking, estimated by averaging shuffled rankings."""
    from semdup.evaluation.metrics import semeval_scores

    rng = random.Random(seed)
    total = 0.0
    for _ in range(repeats):
        preds = {q.post.id: {r.post.id: rng.random() for r in q.related} for q in semeval_set.questions}
        total += semeval_scores(preds, semeval_set.gold())["MAP"]
    return total / repeats


@pytest.mark.slow
def test_tiny_bow_cnn_training_on_semeval_learns(tmp_path: Path) -> None:
    from semdup.evaluation.datasets import load_semeval_xml

    train_set = load_semeval_xml(DATA / "SemEval2016-Task3-CQA-QL-train-part2.xml")
    dev = load_semeval_xml(
        DATA / "SemEval2016-Task3-CQA-QL-dev.xml", DATA / "SemEval2016-Task3-CQA-QL-dev.xml.subtaskB.relevancy"
    )
    data = semeval_training_data([train_set], negatives=5, seed=0)
    settings = TrainSettings(
        arch="bow-cnn",
        epochs=3,
        lr=3e-3,
        batch_size=16,
        negatives=5,
        patience=5,
        max_tokens=40,
        threads=1,
        hparams={"word_vectors": "none", "emb_dim": 16, "conv_units": 32},
    )
    result = train(
        settings,
        data,
        lambda s: eval_semeval(s, dev),
        "MAP",
        tmp_path / "ckpt",
        lambda s: {"dev": eval_semeval(s, dev)},
    )
    assert result.curve[-1]["loss"] < result.curve[0]["loss"]
    assert result.metrics["dev"]["MAP"] > random_semeval_map(dev) + 5.0
    scorer = CheckpointScorer.from_dir(tmp_path / "ckpt")
    assert eval_semeval(scorer, dev)["MAP"] == pytest.approx(result.metrics["dev"]["MAP"], abs=1e-6)
    assert set(scorer.fusion) == {"beta_bow", "beta_dense", "alpha"} and scorer.fusion["beta_bow"] != 0
