"""BOW-CNN: the logistic loss on hand-built scores, and a tiny real training run that learns."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_training import random_semeval_map, tiny_semeval_run

from semdup.core.inputs import build_inputs
from semdup.core.lexical_scores import LexicalIndex
from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary
from semdup.measures.protocols import eval_semeval
from semdup.training.checkpoint import CheckpointScorer, load_checkpoint
from semdup.training.fusion_choice import best_dense_scale
from semdup.training.losses.bow_cnn_logistic import BowCNNLogisticLoss, compute_logistic_loss_from_scores
from semdup.training.models._base import EncoderModel
from semdup.training.models.bow_cnn import BowCNN
from semdup.training.pairs import TrainingData, TrainingGroup
from semdup.training.recipes import recipe_defaults
from semdup.training.trainer import TrainSettings, train


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


@pytest.mark.slow
def test_tiny_bow_cnn_training_on_semeval_learns(tmp_path: Path) -> None:
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
    result, dev = tiny_semeval_run(settings, tmp_path / "ckpt", negatives=5)
    assert result.curve[-1]["loss"] < result.curve[0]["loss"]
    assert result.metrics["dev"]["MAP"] > random_semeval_map(dev) + 5.0
    scorer = CheckpointScorer.from_dir(tmp_path / "ckpt")
    assert eval_semeval(scorer, dev)["MAP"] == pytest.approx(result.metrics["dev"]["MAP"], abs=1e-6)
    assert set(scorer.fusion) == {"beta_bow", "beta_dense", "alpha"} and scorer.fusion["beta_bow"] != 0


# --- the tuning knobs (Travel): exact-TF-IDF start, bag scoring, t prior, conv cut, eval points ---

POSTS = [
    Post("1", "How to mount a USB drive?", "I have a usb stick and want to mount it on ubuntu"),
    Post("2", "mount usb drive ubuntu", "the drive does not show up"),
    Post("3", "", "best visa for india travel from the uk"),
    Post("4", "Visa for India", "Which visa do I need to travel to India as a tourist?"),
    Post("5", "Cheap flights to Delhi", "where can I find cheap flights to india in winter"),
]


def _pipeline(max_tokens: int = 40) -> TextPipeline:
    base = TextPipeline(TextPipelineSettings(max_tokens=max_tokens))
    return TextPipeline(base.settings, Vocabulary.build(base.text_tokens(p) for p in POSTS))


def _model(pipeline: TextPipeline, **hparams: object) -> BowCNN:
    torch.manual_seed(0)
    return BowCNN.from_hparams({"word_vectors": "none", "emb_dim": 8, "conv_units": 16, **hparams}, pipeline)


def _inputs(pipeline: TextPipeline, posts: list[Post]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(v) for k, v in build_inputs("text_ids", pipeline, posts, with_bow=True).items()}


def test_bag_scoring_equals_the_base_class_token_pair_scoring() -> None:
    pipe = _pipeline()
    model = _model(pipe)
    with torch.no_grad():
        model.term_weight.mul_(torch.linspace(0.5, 1.5, model.term_weight.shape[0]))  # not just IDF
    q, c = _inputs(pipe, POSTS[:4]), _inputs(pipe, POSTS[1:5])
    fast = model.score(q, c)
    base = EncoderModel.score_encoded(model, EncoderModel.encode(model, q), EncoderModel.encode(model, c))
    torch.testing.assert_close(fast, base, atol=1e-5, rtol=1e-5)


def test_beta_dense_zero_starts_at_exactly_tfidf_cosine() -> None:
    pipe = _pipeline()
    scorer = CheckpointScorer(_model(pipe, beta_dense_init=0.0).eval(), pipe)
    index = LexicalIndex.build(pipe, POSTS, kind="tfidf")  # idf log(N/df) over the same posts
    np.testing.assert_allclose(scorer.score_matrix(POSTS, POSTS), index.score_matrix(pipe, POSTS), atol=1e-5)


def test_term_l2_penalty_is_zero_at_idf_and_pulls_back_to_it() -> None:
    pipe = _pipeline()
    model = _model(pipe, term_l2=0.1)
    assert model.penalty().item() == 0.0
    with torch.no_grad():
        model.term_weight.add_(1.0)
    model.penalty().backward()
    known = model.idf_prior > 0
    assert (model.term_weight.grad[known] > 0).all()  # gradient descent lowers t back toward IDF
    assert _model(pipe).penalty().item() == 0.0  # term_l2 = 0: no penalty


def test_conv_max_tokens_ignores_later_tokens() -> None:
    pipe = _pipeline()
    model = _model(pipe, conv_max_tokens=4).eval()
    ids = torch.from_numpy(build_inputs("text_ids", pipe, POSTS[:2])["ids"])
    changed = ids.clone()
    changed[:, 4:] = 3  # anything after the cut
    torch.testing.assert_close(model.encoder(ids), model.encoder(changed))
    assert not torch.equal(_model(pipe).eval().encoder(ids), _model(pipe).eval().encoder(changed))


def test_term_lr_and_half_epoch_evaluations(tmp_path: Path) -> None:
    groups = tuple(
        TrainingGroup(POSTS[i], POSTS[j], tuple(p for p in POSTS if p.id not in {POSTS[i].id, POSTS[j].id}))
        for i, j in [(0, 1), (1, 0), (2, 3), (3, 2), (3, 4), (4, 3)]
    )
    data = TrainingData(groups, (), tuple(POSTS), {"source": "toy"})
    settings = TrainSettings(
        arch="bow-cnn", epochs=2, lr=1e-2, batch_size=3, negatives=3, patience=5, threads=1,
        term_lr=0.0, evals_per_epoch=2, hparams={"word_vectors": "none", "emb_dim": 8, "conv_units": 16},
    )
    seen: list[float] = []

    def dev(scorer: CheckpointScorer) -> dict[str, float]:
        seen.append(1.0)
        return {"MAP": float(len(seen))}  # improves every time: the last point is the best

    result = train(settings, data, dev, "MAP", tmp_path / "ckpt")
    assert [r["epoch"] for r in result.curve] == [0.5, 1, 1.5, 2]
    assert result.best_epoch == 2
    model, pipeline, _ = load_checkpoint(tmp_path / "ckpt")
    idf = np.asarray(pipeline.vocab.idf(), dtype=np.float32)
    np.testing.assert_allclose(model.term_weights(), idf, atol=1e-7)  # term_lr = 0: t never moved
    assert model.fusion()["beta_dense"] != 1.0  # the rest did train


def test_recipe_defaults_are_copies() -> None:
    got = recipe_defaults("bow-cnn", "travel")
    got["hparams"]["x"] = 1
    assert "x" not in recipe_defaults("bow-cnn", "travel")["hparams"]
    assert recipe_defaults("no-such-arch", "travel") == {"hparams": {}}


def test_dense_scale_is_chosen_on_dev_and_saved_in_the_checkpoint(tmp_path: Path) -> None:
    pipe = _pipeline()
    model = _model(pipe).eval()
    target = 0.5 * model.fusion()["beta_dense"]
    calls: list[int] = []
    scorer = CheckpointScorer(model, pipe)

    def dev(s: CheckpointScorer) -> dict[str, float]:
        s.score_matrix(POSTS, POSTS)
        calls.append(1)
        return {"MAP": -abs(s.fusion["beta_dense"] - target)}

    scale, figures, per_scale = best_dense_scale(scorer, dev, "MAP", (0.0, 0.5, 1.0))
    assert scale == 0.5 and figures["MAP"] == pytest.approx(0.0, abs=1e-6) and len(per_scale) == 3
    assert len(calls) == 3

    groups = tuple(TrainingGroup(POSTS[i], POSTS[j], (POSTS[4], POSTS[2])) for i, j in [(0, 1), (1, 0)])
    settings = TrainSettings(
        arch="bow-cnn", epochs=1, lr=1e-2, batch_size=2, negatives=2, threads=1, dense_scales=(0.0, 1.0),
        hparams={"word_vectors": "none", "emb_dim": 8, "conv_units": 16},
    )
    result = train(settings, TrainingData(groups, (), tuple(POSTS), {}), lambda s: {"MAP": -s.fusion["beta_dense"]},
                   "MAP", tmp_path / "ckpt")
    assert result.metrics["dense_scale"] == 0.0 and result.curve[-1]["dense_scale"] == 0.0
    assert CheckpointScorer.from_dir(tmp_path / "ckpt").fusion["beta_dense"] == 0.0


@pytest.mark.parametrize("arch", ["bow-cnn", "cnn"])
def test_travel_recipe_defaults_build_valid_settings_and_models(arch: str) -> None:
    chosen = recipe_defaults(arch, "travel")
    hparams = chosen.pop("hparams")
    chosen.pop("lexical_negatives", None)
    chosen.pop("related_negatives", None)
    settings = TrainSettings.for_arch(arch, hparams=hparams, **chosen)
    pipe = _pipeline(max_tokens=settings.max_tokens or 40)
    from semdup.training.registry import get_arch

    spec = get_arch(arch)
    model = spec.model_class.from_hparams({**spec.defaults, **hparams, "word_vectors": "none", "emb_dim": 8}, pipe)
    assert model.get_config_dict()["seed"] == 0 and settings.max_tokens is not None
