"""SCQA / T-SCQA: the contrastive loss on hand-built cosines, padding invariance, ONNX parity, a tiny real run."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_training import random_semeval_map, tiny_semeval_run

from experiments.tscqa_fit import fuse
from semdup.core.errors import ConfigError
from semdup.training.losses.contrastive import ContrastiveLoss, compute_contrastive_loss
from semdup.training.models.scqa import SCQA, TrigramCNNEncoder, _max_pool
from semdup.training.registry import get_arch


def test_contrastive_loss_on_hand_built_cosines() -> None:
    cos = torch.tensor([0.9, 0.5, 0.1, -0.4])
    labels = torch.tensor([1.0, 0.0, 0.0, 1.0])
    # positives: 1 − 0.9 = 0.1 and 1 − (−0.4) = 1.4; negatives: max(0, 0.5 − 0.3) = 0.2 and max(0, 0.1 − 0.3) = 0
    expected = (0.1 + 0.2 + 0.0 + 1.4) / 4
    assert compute_contrastive_loss(cos, labels, 0.3).item() == pytest.approx(expected, rel=1e-6)
    cos.requires_grad_(True)
    ContrastiveLoss(margin=0.3)(cos, labels).backward()
    assert cos.grad.tolist() == pytest.approx([-0.25, 0.25, 0.0, -0.25])  # a negative below m gets no gradient


def test_contrastive_loss_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="margin"):
        ContrastiveLoss(margin=1.5)
    with pytest.raises(ValueError, match="labels"):
        ContrastiveLoss()(torch.tensor([0.1]))


def test_max_pool_keeps_a_short_last_window() -> None:
    x = torch.tensor([[[1.0, 5.0, 2.0, 0.0, 7.0]]])
    assert _max_pool(x, 2, -1e9).tolist() == [[[5.0, 2.0, 7.0]]]


def test_padding_does_not_change_a_post_vector() -> None:
    torch.manual_seed(0)
    enc = TrigramCNNEncoder(buckets=300, trigram_dim=8, conv_units=12, out_dim=6).eval()
    post = torch.randint(1, 301, (1, 5, 4))
    post[0, 2, 2:] = 0  # a short word
    padded = torch.cat([post, torch.zeros(1, 9, 4, dtype=torch.long)], dim=1)
    with torch.no_grad():
        assert torch.allclose(enc(post), enc(padded), atol=1e-6)


def test_onnx_export_matches_torch_with_dynamic_batch_and_length(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    model = SCQA(buckets=500, trigram_dim=16, conv_units=24, out_dim=8).eval()
    enc = model.dense_encoder()
    example = torch.randint(0, 501, (2, 7, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            enc,
            (example,),
            str(tmp_path / "scqa.onnx"),
            input_names=["trigram_ids"],
            output_names=["vector"],
            dynamic_shapes={"trigram_ids": {0: torch.export.Dim("batch"), 1: torch.export.Dim("length")}},
        )
    session = ort.InferenceSession(str(tmp_path / "scqa.onnx"), providers=["CPUExecutionProvider"])
    for batch, length in [(1, 3), (4, 4), (3, 17), (2, 30)]:
        x = torch.randint(0, 501, (batch, length, 5))
        got = session.run(None, {"trigram_ids": x.numpy()})[0]
        with torch.no_grad():
            want = enc(x).numpy()
        assert np.abs(got - want).max() < 1e-4


def test_scqa_contract_and_t_scqa_fusion() -> None:
    scqa = SCQA(buckets=100)
    assert scqa.term_weights() is None
    assert scqa.fusion() == {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.0}
    t = SCQA(buckets=100, tscqa_alpha=0.8)
    assert t.fusion() == pytest.approx({"beta_bow": 0.0, "beta_dense": 0.8, "alpha": 0.2})
    assert t.get_config_dict()["tscqa_alpha"] == 0.8
    with pytest.raises(ValueError, match="tscqa_alpha"):
        SCQA(buckets=100, tscqa_alpha=1.5)
    with pytest.raises(ConfigError, match="trigram_buckets"):
        SCQA(buckets=0)
    assert get_arch("scqa").batch_format == "pairs" and get_arch("t-scqa").defaults["tscqa_alpha"] == 0.8


def test_t_scqa_interpolation_on_hand_built_scores() -> None:
    got = fuse(np.array([1.0, 0.0]), np.array([0.0, 1.0]), 0.8)
    assert got.tolist() == pytest.approx([0.8, 0.2])


@pytest.mark.slow
def test_tiny_scqa_training_on_semeval_learns_and_t_scqa_tunes_alpha_on_dev(tmp_path: Path) -> None:
    """A tiny SCQA run, then T-SCQA through the research script (experiments/tscqa.py) on real dev and test."""
    from semdup.measures.protocols import eval_semeval
    from semdup.training.checkpoint import CheckpointScorer
    from semdup.training.trainer import TrainSettings

    settings = TrainSettings(
        arch="scqa",
        epochs=3,
        lr=2e-3,
        batch_size=32,
        patience=5,
        max_tokens=30,
        threads=1,
        hparams={"trigram_dim": 32, "conv_units": 48, "out_dim": 32},
    )
    result, dev = tiny_semeval_run(settings, tmp_path / "ckpt", negatives=5)
    assert result.curve[-1]["loss"] < result.curve[0]["loss"]
    assert result.metrics["dev"]["MAP"] > random_semeval_map(dev) + 3.0
    scorer = CheckpointScorer.from_dir(tmp_path / "ckpt")
    assert eval_semeval(scorer, dev)["MAP"] == pytest.approx(result.metrics["dev"]["MAP"], abs=1e-6)

    from click.testing import CliRunner

    from experiments.tscqa import main

    args = ["--checkpoint", str(tmp_path / "ckpt"), "--data", "semeval", "--out", str(tmp_path / "t")]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    tuned = json.loads(res.stdout)
    curve = {float(a): m for a, m in tuned["dev_curve"].items()}
    assert tuned["alpha"] == max(curve, key=lambda a: (curve[a], a))  # dev-best α, ties to more SCQA
    assert tuned["dev"]["MAP"] == pytest.approx(curve[tuned["alpha"]])
    assert tuned["scqa_alone"]["dev"]["MAP"] == pytest.approx(curve[1.0])
    assert tuned["scqa_alone"]["dev"]["MAP"] == pytest.approx(result.metrics["dev"]["MAP"], abs=1e-6)
    config = json.loads((tmp_path / "t" / "config.json").read_text())
    assert config["arch"] == "t-scqa" and config["hparams"]["tscqa_alpha"] == tuned["alpha"]
    a = tuned["alpha"]
    assert config["fusion"] == pytest.approx({"beta_bow": 0.0, "beta_dense": a, "alpha": 1 - a})
