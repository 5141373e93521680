"""A fine-tuned checkpoint shipped as its delta over the base model is rebuilt exactly, and half-precision bases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from experiments.checkpoint_delta import read_delta, write_delta, write_half_precision_base
from semdup.core.errors import BundleError
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary
from semdup.training.checkpoint import load_checkpoint, save_checkpoint
from semdup.training.models.bow_minilm import BowMiniLM


@pytest.fixture(scope="module")
def base16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_half_precision_base(tmp_path_factory.mktemp("minilm16"))


def _fine_tuned(tmp_path: Path, model_dir: Path) -> Path:
    """A bow-minilm checkpoint whose top layer and term weights moved, as fine-tuning moves them."""
    settings = TextPipelineSettings()
    pipe = TextPipeline(settings)
    vocab = Vocabulary.build([pipe.tokens("visa for qatar"), pipe.tokens("mount a usb drive")])
    pipe = TextPipeline(settings, vocab)
    model = BowMiniLM.from_hparams({"model_dir": str(model_dir), "freeze_layers": 5}, pipe)
    torch.manual_seed(0)
    with torch.no_grad():
        for _name, p in model.named_parameters():
            if p.requires_grad:
                p.add_(0.01 * torch.randn_like(p))
    return save_checkpoint(tmp_path / "ckpt", model, "bow-minilm", pipe, {"threshold": 0.5})


def test_half_precision_base_loads_as_float32(base16: Path) -> None:
    from semdup.training.models.minilm import _load_bert, minilm_model_dir

    half, full = _load_bert(base16, True), _load_bert(minilm_model_dir(), True)
    w16 = dict(half.named_parameters())
    for name, p in full.named_parameters():
        assert w16[name].dtype == torch.float32
        torch.testing.assert_close(w16[name], p.half().float(), rtol=0, atol=0)


def test_delta_holds_only_what_changed_and_rebuilds_the_checkpoint(tmp_path: Path, base16: Path) -> None:
    ckpt = _fine_tuned(tmp_path, base16)
    names = write_delta(ckpt, tmp_path / "delta", shard_bytes=2**20)
    frozen = ("encoder.bert.embeddings.", *(f"encoder.bert.encoder.layer.{i}." for i in range(5)))
    assert any(n.startswith("encoder.bert.encoder.layer.5.") for n in names)
    assert not any(n.startswith(frozen) for n in names)  # the frozen weights stay out of the delta
    assert len(json.loads((tmp_path / "delta" / "delta.json").read_text())["shards"]) > 1  # sharded
    rebuilt = read_delta(tmp_path / "delta", tmp_path / "rebuilt", record_model_dir="")
    a = torch.load(ckpt / "model.pt", weights_only=True)
    b = torch.load(rebuilt / "model.pt", weights_only=True)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    model, _, config = load_checkpoint(rebuilt)
    assert config["hparams"]["model_dir"] == "" and config["threshold"] == 0.5


def test_a_folder_without_manifest_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="not a checkpoint delta"):
        read_delta(tmp_path, tmp_path / "out")
