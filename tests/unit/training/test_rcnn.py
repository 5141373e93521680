"""RCNN: max-margin loss by hand, the recurrence against a plain-Python reference, ONNX parity,
pre-trained weights loading, and tiny real training and pre-training runs."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_training import random_semeval_map, tiny_semeval_run

from semdup.core.errors import ConfigError
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary
from semdup.training.losses.max_margin import MaxMarginLoss, compute_max_margin_loss
from semdup.training.models.rcnn import RCNN, GatedRecurrence


def test_max_margin_loss_on_hand_built_scores() -> None:
    scores = torch.tensor([[0.9, 0.1, 0.8], [0.5, 0.9, 0.2], [0.9, 0.0, 0.1]])
    # hardest negatives 0.8, 0.9, 0.1: max(0, 0.8 − 0.9 + 0.2) = 0.1, 0.9 − 0.5 + 0.2 = 0.6, max(0, −0.6) = 0
    assert compute_max_margin_loss(scores[:, 0], scores[:, 1:], 0.2).item() == pytest.approx((0.1 + 0.6) / 3)
    scores.requires_grad_(True)
    MaxMarginLoss(margin=0.2)(scores).backward()
    g = scores.grad
    assert g[0, 1] == 0 and g[0, 2] > 0 and g[0, 0] < 0  # only the hardest negative moves
    assert torch.all(g[2] == 0)  # a satisfied margin costs nothing


def test_max_margin_loss_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="margin"):
        MaxMarginLoss(margin=0.0)
    with pytest.raises(ValueError, match="1 \\+ n_negatives"):
        MaxMarginLoss()(torch.tensor([0.3, 0.2]))


def _reference_states(rec: GatedRecurrence, xs: list[list[float]], mask: list[float]) -> list[list[float]]:
    """The paper's equations with Python floats, one step and one unit at a time."""
    hid, n = rec.hidden_dim, rec.order
    w = rec.input_proj.weight.detach().tolist()
    b = rec.input_proj.bias.detach().tolist()
    u = rec.state_proj.weight.detach().tolist()
    bias = rec.bias.detach().tolist()
    h = [0.0] * hid
    c = [[0.0] * hid for _ in range(n)]
    out = []
    for x, m in zip(xs, mask, strict=True):
        proj = [sum(w[r][j] * x[j] for j in range(len(x))) + b[r] for r in range(hid * (n + 1))]
        new_c = [[0.0] * hid for _ in range(n)]
        new_h = [0.0] * hid
        for i in range(hid):
            lam = 1.0 / (1.0 + math.exp(-(proj[i] + sum(u[i][j] * h[j] for j in range(hid)))))
            for k in range(n):
                below = c[k - 1][i] if k > 0 else 0.0
                new_c[k][i] = lam * c[k][i] + (1 - lam) * (below + proj[(k + 1) * hid + i])
            new_h[i] = math.tanh(new_c[n - 1][i] + bias[i])
        if m:
            h, c = new_h, new_c
        out.append(list(h))
    return out


def test_recurrence_matches_a_plain_python_reference() -> None:
    torch.manual_seed(0)
    rec = GatedRecurrence(input_dim=3, hidden_dim=2, order=2)
    with torch.no_grad():
        rec.bias.copy_(torch.tensor([0.1, -0.2]))
    xs = [[0.5, -1.0, 0.2], [1.0, 0.3, -0.7], [-0.4, 0.8, 0.1], [0.0, 0.0, 0.0]]
    mask = [1.0, 1.0, 1.0, 0.0]  # the last step is padding: state carried over
    want = _reference_states(rec, xs, mask)
    x = torch.tensor([xs])
    m = torch.tensor([mask])
    h0, c0 = torch.zeros(1, 2), torch.zeros(1, 2, 2)
    with torch.no_grad():
        states = rec.all_states(x, m, h0, c0)[0].tolist()
        total, last = rec(x, m, h0, c0)
        scripted_total, scripted_last = torch.jit.script(rec)(x, m, h0, c0)
    for got_row, want_row in zip(states, want, strict=True):
        assert got_row == pytest.approx(want_row, abs=1e-6)
    assert last[0].tolist() == pytest.approx(want[2], abs=1e-6)
    assert total[0].tolist() == pytest.approx([sum(r[i] for r in want[:3]) for i in range(2)], abs=1e-6)
    assert torch.allclose(scripted_total, total, atol=1e-6) and torch.allclose(scripted_last, last, atol=1e-6)


@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_padding_and_empty_fields_do_not_change_a_post_vector(pooling: str) -> None:
    torch.manual_seed(0)
    model = RCNN(vocab_size=50, emb_dim=6, hidden_dim=8, pooling=pooling).eval()
    title, body = torch.tensor([[4, 9, 0]]), torch.tensor([[7, 8, 9, 10, 0]])
    with torch.no_grad():
        alone = model.encoder(title, body)
        padded = model.encoder(torch.cat([title, torch.zeros(1, 6, dtype=torch.long)], 1), body)
        title_only = model.encoder(title, torch.zeros(1, 3, dtype=torch.long))
        t_vec, _ = model.encoder.encode_field(title)
    assert torch.allclose(alone, padded, atol=1e-6)
    assert torch.allclose(title_only, t_vec, atol=1e-6)  # a missing body does not halve the vector


@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_onnx_export_matches_torch_with_dynamic_batch_and_length(tmp_path: Path, pooling: str) -> None:
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    model = RCNN(vocab_size=100, emb_dim=8, hidden_dim=16, pooling=pooling).eval()
    enc = model.dense_encoder()
    assert enc.onnx_exporter == "torchscript"
    example = (torch.randint(1, 100, (2, 4)), torch.randint(1, 100, (2, 6)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            enc,
            example,
            str(tmp_path / "rcnn.onnx"),
            dynamo=False,
            input_names=["title_ids", "body_ids"],
            output_names=["vector"],
            dynamic_axes={
                "title_ids": {0: "batch", 1: "lt"},
                "body_ids": {0: "batch", 1: "lb"},
                "vector": {0: "batch"},
            },
        )
    session = ort.InferenceSession(str(tmp_path / "rcnn.onnx"), providers=["CPUExecutionProvider"])
    for batch, lt, lb in [(1, 3, 3), (5, 7, 30), (3, 1, 50)]:
        t = torch.randint(0, 100, (batch, lt))
        b = torch.randint(0, 100, (batch, lb))
        got = session.run(None, {"title_ids": t.numpy(), "body_ids": b.numpy()})[0]
        with torch.no_grad():
            want = model.encode({"title_ids": t, "body_ids": b}).dense.numpy()
        assert np.abs(got - want).max() < 1e-4


def test_pretrained_encoder_loads_weights_and_shared_words(tmp_path: Path) -> None:
    from semdup.training.models.rcnn import PRETRAIN_FORMAT as _FORMAT
    from semdup.training.models.rcnn import load_pretrained_encoder

    torch.manual_seed(0)
    source = RCNN(vocab_size=4, emb_dim=3, hidden_dim=5)
    payload = {
        "format": _FORMAT,
        "hparams": {"emb_dim": 3, "hidden_dim": 5, "order": 2},
        "tokens": ["<pad>", "<unk>", "ubuntu", "boot"],
        "embedding": torch.arange(12, dtype=torch.float32).view(4, 3),
        "recurrence": source.encoder.recurrence.state_dict(),
    }
    torch.save(payload, tmp_path / "pt.pt")
    pipe = TextPipeline(TextPipelineSettings(), Vocabulary(["<pad>", "<unk>", "boot", "grub"], [0, 0, 1, 1], 2))
    target = RCNN.from_hparams({"emb_dim": 3, "hidden_dim": 5, "word_vectors": "none"}, pipe)
    grub_before = target.encoder.embedding.weight[3].clone()
    got = load_pretrained_encoder(target, pipe, tmp_path / "pt.pt")
    assert got["shared_words"] == 2  # <unk> and boot
    assert target.encoder.embedding.weight[2].tolist() == [9.0, 10.0, 11.0]
    assert torch.equal(target.encoder.embedding.weight[3], grub_before)
    assert torch.equal(target.encoder.recurrence.state_proj.weight, source.encoder.recurrence.state_proj.weight)
    with pytest.raises(ConfigError, match="hidden_dim=5"):
        load_pretrained_encoder(
            RCNN.from_hparams({"emb_dim": 3, "hidden_dim": 7, "word_vectors": "none"}, pipe), pipe, tmp_path / "pt.pt"
        )
    with pytest.raises(ConfigError, match="cannot read"):
        load_pretrained_encoder(target, pipe, tmp_path / "missing.pt")


@pytest.mark.slow
def test_tiny_rcnn_training_on_semeval_learns(tmp_path: Path) -> None:
    from semdup.measures.protocols import eval_semeval
    from semdup.training.checkpoint import CheckpointScorer
    from semdup.training.trainer import TrainSettings

    settings = TrainSettings(
        arch="rcnn",
        epochs=3,
        lr=3e-3,
        batch_size=16,
        negatives=5,
        patience=5,
        max_tokens=25,
        threads=1,
        hparams={"word_vectors": "none", "emb_dim": 16, "hidden_dim": 24, "freeze_embeddings": False},
    )
    result, dev = tiny_semeval_run(settings, tmp_path / "ckpt", negatives=5)
    assert result.curve[-1]["loss"] < result.curve[0]["loss"]
    assert result.metrics["dev"]["MAP"] > random_semeval_map(dev) + 3.0
    scorer = CheckpointScorer.from_dir(tmp_path / "ckpt")
    assert eval_semeval(scorer, dev)["MAP"] == pytest.approx(result.metrics["dev"]["MAP"], abs=1e-6)


@pytest.mark.slow
def test_tiny_body_to_title_pretraining_lowers_the_loss(tmp_path: Path) -> None:
    """Through the research script (experiments/pretrain_rcnn.py), which calls pretrain_rcnn."""
    from click.testing import CliRunner

    from experiments.pretrain_rcnn import main

    args = ["--out", str(tmp_path / "pt.pt"), "--minutes", "1", "--max-steps", "40", "--batch-size", "16"]
    args += ["--threads", "1", "--set", "word_vectors=none", "--set", "emb_dim=16", "--set", "hidden_dim=24"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    figures = json.loads(res.stdout)
    assert 0 < figures["steps"] <= 40  # --max-steps caps the run (--minutes may stop it first)
    assert figures["train_loss_last"] < figures["train_loss_first"]
    assert math.isfinite(figures["held_out_perplexity"])
    payload = torch.load(tmp_path / "pt.pt", weights_only=True)
    assert payload["hparams"]["hidden_dim"] == 24 and len(payload["tokens"]) == figures["vocab_size"]
