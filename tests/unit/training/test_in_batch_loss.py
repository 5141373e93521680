"""The in-batch softmax loss: hand-built values, and the trainer's batch-wide score matrix."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from semdup.core.errors import ConfigError
from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary
from semdup.training.losses.in_batch import InBatchSoftmaxLoss
from semdup.training.models.bow_minilm import BowMiniLM
from semdup.training.models.minilm import MiniLM
from semdup.training.trainer import TrainSettings, _group_loss


def test_loss_is_cross_entropy_over_scaled_cosines() -> None:
    scores = torch.tensor([[0.9, 0.1, 0.3], [0.2, 0.8, 0.0]])
    got = InBatchSoftmaxLoss(scale=2.0)(scores, torch.tensor([0, 1]))
    row0 = -math.log(math.exp(1.8) / (math.exp(1.8) + math.exp(0.2) + math.exp(0.6)))
    row1 = -math.log(math.exp(1.6) / (math.exp(0.4) + math.exp(1.6) + math.exp(0.0)))
    assert float(got) == pytest.approx((row0 + row1) / 2, rel=1e-6)


def _groups() -> list[SimpleNamespace]:
    p = lambda i, t: Post(str(i), t, "")  # noqa: E731
    return [
        SimpleNamespace(
            query=p(1, "visa for qatar"), positive=p(2, "qatar visa rules"), negatives=(p(3, "usb drive"),)
        ),
        SimpleNamespace(query=p(4, "mount usb"), positive=p(5, "usb drive mount"), negatives=(p(6, "doha taxi"),)),
    ]


def test_trainer_scores_every_query_against_every_candidate() -> None:
    torch.manual_seed(0)
    model = MiniLM.from_hparams({"freeze_layers": 5, "max_len": 32}, TextPipeline(TextPipelineSettings()))
    loss = _group_loss(model, InBatchSoftmaxLoss(), model.pipeline, _groups())
    loss.backward()
    assert torch.isfinite(loss) and loss > 0
    assert any(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_bag_of_words_models_are_refused() -> None:
    pipe = TextPipeline(TextPipelineSettings())
    pipe = TextPipeline(pipe.settings, Vocabulary.build([pipe.tokens("visa qatar usb drive mount doha taxi")]))
    model = BowMiniLM.from_hparams({"freeze_layers": 6, "max_len": 32}, pipe)
    with pytest.raises(ConfigError, match="dense vectors only"):
        _group_loss(model, InBatchSoftmaxLoss(), pipe, _groups())


def test_unknown_loss_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="not one of"):
        TrainSettings(arch="minilm", loss="softmax")
