"""travel_fusion's BOW-CNN feature: the checkpoint's own score, scaled; its bag-of-words part; seed means."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from experiments.travel_fusion import bow_cnn_features
from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary
from semdup.training.checkpoint import CheckpointScorer, save_checkpoint
from semdup.training.models.bow_cnn import BowCNN

POSTS = [
    Post("1", "Visa for India", "Which visa do I need to travel to India as a tourist?"),
    Post("2", "Indian tourist visa", "tourist visa rules for india"),
    Post("3", "Cheap flights to Delhi", "where can I find cheap flights to india in winter"),
    Post("4", "Luggage allowance", "how much luggage can I take on a train in Germany"),
]


def _checkpoint(out: Path, seed: int) -> Path:
    base = TextPipeline(TextPipelineSettings(max_tokens=40))
    pipe = TextPipeline(base.settings, Vocabulary.build(base.text_tokens(p) for p in POSTS))
    torch.manual_seed(seed)
    hparams = {"word_vectors": "none", "emb_dim": 8, "conv_units": 16, "beta_init": 0.5 + seed}
    model = BowCNN.from_hparams(hparams, pipe)
    return save_checkpoint(out, model, "bow-cnn", pipe)


def test_fused_is_the_checkpoints_score_over_the_beta_sum_and_bow_its_bag_part(tmp_path: Path) -> None:
    ckpt = _checkpoint(tmp_path / "a", seed=0)
    queries = {"dev": [SimpleNamespace(post=POSTS[0]), SimpleNamespace(post=POSTS[2])]}
    got = bow_cnn_features([str(ckpt)], queries, POSTS)
    scorer = CheckpointScorer.from_dir(ckpt)
    f = scorer.fusion
    expected = scorer.score_matrix([POSTS[0], POSTS[2]], POSTS) / (f["beta_bow"] + f["beta_dense"])
    np.testing.assert_allclose(got["fused"]["dev"], expected, rtol=1e-5, atol=1e-6)
    scorer.fusion = {**f, "beta_dense": 0.0, "beta_bow": 1.0}
    np.testing.assert_allclose(got["bow"]["dev"], scorer.score_matrix([POSTS[0], POSTS[2]], POSTS), atol=1e-6)
    assert got["bow"]["dev"][0, 0] == np.float64(got["bow"]["dev"].max())  # a post is closest to itself


def test_several_checkpoints_give_the_mean_of_their_features(tmp_path: Path) -> None:
    dirs = [str(_checkpoint(tmp_path / str(s), seed=s)) for s in (0, 1)]
    queries = {"dev": [SimpleNamespace(post=POSTS[1])]}
    both = bow_cnn_features(dirs, queries, POSTS)
    each = [bow_cnn_features([d], queries, POSTS) for d in dirs]
    for kind in ("fused", "bow"):
        np.testing.assert_allclose(both[kind]["dev"], (each[0][kind]["dev"] + each[1][kind]["dev"]) / 2, atol=1e-6)
