"""CNN (Bogdanova 2015): the MSE-cosine loss on hand-built scores, and a tiny real training run that learns."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny_training import random_semeval_map, tiny_semeval_run

from semdup.core.errors import ConfigError
from semdup.training.losses.mse_cosine import MSECosineLoss, compute_mse_loss_from_scores
from semdup.training.models.cnn import ConvSumEncoder
from semdup.training.trainer import TrainSettings


def test_mse_cosine_loss_on_hand_built_scores() -> None:
    got = compute_mse_loss_from_scores(torch.tensor([0.8, 0.1, -0.5]), torch.tensor([1.0, 0.0, 0.0]))
    assert got.item() == pytest.approx((0.04 + 0.01 + 0.25) / 3)
    with pytest.raises(ValueError, match="labels"):
        MSECosineLoss()(torch.tensor([0.5]))


def test_sum_pooling_ignores_padding() -> None:
    enc = ConvSumEncoder(vocab_size=10, emb_dim=4, units=3).eval()
    short = torch.tensor([[2, 3, 4, 0, 0, 0]])
    with torch.no_grad():
        a = enc(short)
        b = enc(short[:, :3])
        empty = enc(torch.zeros((1, 3), dtype=torch.long))
    torch.testing.assert_close(a, b)
    assert torch.count_nonzero(empty) == 0


def test_mean_pooling_does_not_saturate_on_long_posts() -> None:
    torch.manual_seed(0)
    long_post = torch.randint(2, 50, (1, 300))
    saturated = {}
    for pooling in ("sum", "mean"):
        torch.manual_seed(1)
        enc = ConvSumEncoder(vocab_size=50, emb_dim=8, units=64, pooling=pooling).eval()
        with torch.no_grad():
            r = enc(long_post)
            padded = torch.cat([long_post, torch.zeros((1, 5), dtype=torch.long)], dim=1)
            torch.testing.assert_close(r, enc(padded))  # padding stays out of either pooling
        saturated[pooling] = (r.abs() > 0.99).float().mean().item()  # tanh' < 0.02: no gradient there
    assert saturated["sum"] > 0.5
    assert saturated["mean"] == 0.0
    with pytest.raises(ConfigError, match="pooling"):
        ConvSumEncoder(vocab_size=5, emb_dim=2, units=2, pooling="max")


@pytest.mark.slow
def test_tiny_cnn_training_on_semeval_learns(tmp_path: Path) -> None:
    settings = TrainSettings(
        arch="cnn",
        epochs=4,
        lr=3e-3,
        batch_size=32,
        patience=5,
        max_tokens=40,
        threads=1,
        hparams={"word_vectors": "none", "emb_dim": 16, "conv_units": 32},
    )
    result, dev = tiny_semeval_run(settings, tmp_path / "ckpt")
    assert result.curve[-1]["loss"] < result.curve[0]["loss"]
    assert result.metrics["dev"]["MAP"] > random_semeval_map(dev)
