"""The dev-chosen dense scale reaches the model's fusion for every way a model holds β_dense."""

from __future__ import annotations

import pytest

from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary
from semdup.training.models.bow_minilm import BowMiniLM
from semdup.training.trainer import _scale_dense_weight


def _pipeline() -> TextPipeline:
    pipe = TextPipeline(TextPipelineSettings())
    return TextPipeline(pipe.settings, Vocabulary.build([pipe.tokens("visa for qatar"), pipe.tokens("usb drive")]))


def test_bow_minilm_derived_beta_is_scaled_through_its_parameter() -> None:
    model = BowMiniLM.from_hparams({"freeze_layers": 6}, _pipeline())
    before = model.fusion()
    _scale_dense_weight(model, 2.0)
    after = model.fusion()
    assert after["beta_dense"] == pytest.approx(2.0 * before["beta_dense"])
    assert after["beta_bow"] == pytest.approx(before["beta_bow"])


def test_a_model_whose_scale_is_lost_is_refused() -> None:
    model = BowMiniLM.from_hparams({"freeze_layers": 6}, _pipeline())
    model.scale_dense = lambda factor: None  # type: ignore[method-assign]  # the old bug: scaling a copy
    with pytest.raises(RuntimeError, match="did not scale"):
        _scale_dense_weight(model, 2.0)
