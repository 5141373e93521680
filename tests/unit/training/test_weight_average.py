"""WeightAverage: a bias-corrected moving average of trainable weights, applied and taken back."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from semdup.core.errors import ConfigError
from semdup.training.loop import WeightAverage
from semdup.training.trainer import TrainSettings


def _model() -> nn.Module:
    model = nn.Linear(2, 1, bias=True)
    model.bias.requires_grad_(False)  # a frozen tensor is left out of the average
    return model


def _set(model: nn.Module, value: float) -> None:
    with torch.no_grad():
        model.weight.fill_(value)


def test_the_average_is_bias_corrected_and_weighs_recent_steps_more() -> None:
    model = _model()
    ema = WeightAverage(model, decay=0.5)
    _set(model, 2.0)
    ema.update(model)
    # one step: the average is that step's weights, not pulled towards the zero start
    assert torch.allclose(ema.averaged_state()["weight"], torch.full((1, 2), 2.0))
    _set(model, 4.0)
    ema.update(model)
    # (0.5·0.5·2 + 0.5·4) / (1 − 0.25) = 3.333…
    assert torch.allclose(ema.averaged_state()["weight"], torch.full((1, 2), 10.0 / 3.0))
    assert "bias" not in ema.averaged_state()


def test_applied_swaps_the_average_in_and_restores_the_raw_weights() -> None:
    model = _model()
    ema = WeightAverage(model, decay=0.9)
    for v in (1.0, 3.0):
        _set(model, v)
        ema.update(model)
    bias = model.bias.detach().clone()
    with ema.applied(model):
        inside = model.weight.detach().clone()
    assert 1.0 < float(inside[0, 0]) < 3.0
    assert torch.equal(model.weight.detach(), torch.full((1, 2), 3.0))
    assert torch.equal(model.bias.detach(), bias)


def test_bad_decays_are_refused_with_the_accepted_range() -> None:
    with pytest.raises(ConfigError, match=r"\(0, 1\)"):
        WeightAverage(_model(), decay=1.0)
    with pytest.raises(ConfigError, match=r"\[0, 1\)"):
        TrainSettings(arch="bow-cnn", ema_decay=-0.1)
    with pytest.raises(RuntimeError, match="no step"):
        WeightAverage(_model(), decay=0.9).averaged_state()


def test_an_averaged_run_scores_dev_with_and_saves_the_averaged_weights(tmp_path: Path) -> None:
    from semdup.core.posts import Post
    from semdup.training.checkpoint import load_checkpoint
    from semdup.training.pairs import TrainingData, TrainingGroup
    from semdup.training.trainer import train

    posts = [
        Post("1", "How to mount a USB drive?", "I have a usb stick and want to mount it on ubuntu"),
        Post("2", "mount usb drive ubuntu", "the drive does not show up"),
        Post("3", "Visa for India", "Which visa do I need to travel to India as a tourist?"),
        Post("4", "Cheap flights to Delhi", "where can I find cheap flights to india in winter"),
    ]
    groups = tuple(TrainingGroup(posts[i], posts[j], (posts[2], posts[3])) for i, j in [(0, 1), (1, 0)])
    data = TrainingData(groups, (), tuple(posts), {"source": "toy"})
    seen: dict[float, list[float]] = {0.0: [], 0.9: []}
    for decay in seen:
        settings = TrainSettings(
            arch="bow-cnn", epochs=3, lr=5e-2, batch_size=1, negatives=2, patience=5, threads=1, ema_decay=decay,
            hparams={"word_vectors": "none", "emb_dim": 8, "conv_units": 16},
        )

        def dev(scorer, got=seen[decay]) -> dict[str, float]:
            got.append(scorer.model.fusion()["beta_dense"])
            return {"MAP": float(len(got))}  # improves every time: the last check is the best

        train(settings, data, dev, "MAP", tmp_path / str(decay))
        saved, _, _ = load_checkpoint(tmp_path / str(decay))
        assert saved.fusion()["beta_dense"] == pytest.approx(seen[decay][-1])
    # same seed, same raw steps: the averaged run's checks lag behind the raw weights
    assert seen[0.9][-1] != pytest.approx(seen[0.0][-1])
