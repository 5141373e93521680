"""CNN pair classifier (Bogdanova et al. 2015): a sum-pooled convolution compared by cosine.

    r(q) = tanh(Σ_j tanh(W · [e_{j-1}; e_j; e_{j+1}] + b))     window k = 3 (§3)
    s(q, c) = cos(r(q), r(c));  duplicate ⇔ s > θ, θ tuned on held-out data

trained with the mean squared error of s against 1/0 labels (:class:`MSECosineLoss`).

Reference: D. Bogdanova, C. dos Santos, L. Barbosa, B. Zadrozny, "Detecting Semantically
Equivalent Questions in Online User Forums", CoNLL 2015, §3 (model) and §4 (setup).

Example::

    >>> model = CNN.from_hparams({"conv_units": 300}, pipeline)
    >>> model.score(batch_q, batch_c)            # cosines [B]
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from semdup.core.errors import ConfigError
from semdup.core.text_pipeline import PAD_ID, TextPipeline
from semdup.training.losses.mse_cosine import MSECosineLoss
from semdup.training.models._base import EncoderModel
from semdup.training.models.bow_cnn import initial_embeddings
from semdup.training.registry import ArchSpec, register

__all__ = ["CNN", "ConvSumEncoder", "POOLINGS"]

logger = logging.getLogger(__name__)

POOLINGS = ("sum", "mean")


class ConvSumEncoder(nn.Module):
    """ids [B, L] → tanh(Σ_j tanh(conv_j)) [B, units], padding positions left out of the sum.

    Args:
        vocab_size: rows of the embedding table (row 0 is padding).
        emb_dim: word vector size.
        units: convolution filters (the paper's best: 200–300 on AskUbuntu).
        window: convolution width k (3).
        embeddings: optional initial table [vocab_size, emb_dim].
        pooling: ``"sum"`` (the paper) or ``"mean"``: over a long post the sum of ~100+ tanh
            values saturates the outer tanh at ±1 in every unit, so all posts look alike; the
            mean keeps them apart (Travel posts are long).
    """

    def __init__(
        self,
        vocab_size: int,
        emb_dim: int,
        units: int,
        window: int = 3,
        embeddings: np.ndarray | None = None,
        pooling: str = "sum",
    ) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ConfigError(f"pooling {pooling!r} is not one of {POOLINGS}")
        self.pooling = pooling
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        if embeddings is not None:
            with torch.no_grad():
                self.embedding.weight.copy_(torch.from_numpy(np.asarray(embeddings, dtype=np.float32)))
                self.embedding.weight[PAD_ID].zero_()
        self.conv = nn.Conv1d(emb_dim, units, kernel_size=window, padding=window // 2)

    def forward(self, ids: Tensor) -> Tensor:
        mask = (ids != PAD_ID).unsqueeze(1).to(self.conv.weight.dtype)  # (B, 1, L)
        x = self.embedding(ids).transpose(1, 2)  # (B, E, L)
        h = torch.tanh(self.conv(x)) * mask  # (B, U, L)
        pooled = h.sum(dim=2)  # (B, U)
        if self.pooling == "mean":
            pooled = pooled / mask.sum(dim=2).clamp_min(1.0)
        return torch.tanh(pooled)  # (B, U)


class CNN(EncoderModel):
    """Bogdanova et al.'s siamese CNN; the score is the cosine of the two representations.

    Hyper-parameters: ``emb_dim`` (50), ``conv_units`` (300), ``window`` (3), ``word_vectors``
    ("glove", "word2vec" or "none"), ``seed``, ``pooling`` ("sum" as the paper, or "mean").
    """

    input_kind = "text_ids"
    uses_bow = False

    def __init__(
        self,
        vocab_size: int,
        emb_dim: int = 50,
        conv_units: int = 300,
        window: int = 3,
        embeddings: np.ndarray | None = None,
        pooling: str = "sum",
    ) -> None:
        super().__init__()
        self.encoder = ConvSumEncoder(vocab_size, emb_dim, conv_units, window, embeddings, pooling)
        self.beta_dense = 1.0

    @classmethod
    def from_hparams(cls, hparams: Mapping[str, Any], pipeline: TextPipeline, pretrained: bool = True) -> CNN:
        h = {**CNN_DEFAULTS, **dict(hparams)}
        unknown = set(h) - set(CNN_DEFAULTS)
        if unknown:
            raise ConfigError(f"unknown cnn hyper-parameters {sorted(unknown)}; known: {sorted(CNN_DEFAULTS)}")
        emb = initial_embeddings(pipeline, h["word_vectors"], h["emb_dim"], h["seed"]) if pretrained else None
        model = cls(
            len(pipeline.vocab), int(h["emb_dim"]), int(h["conv_units"]), int(h["window"]), emb, str(h["pooling"])
        )
        model.hparams = h
        return model

    def dense_encoder(self) -> nn.Module:
        return self.encoder


CNN_DEFAULTS: dict[str, Any] = {
    "emb_dim": 50,
    "conv_units": 300,
    "window": 3,
    "word_vectors": "glove",
    "seed": 0,
    "pooling": "sum",
}

register(
    ArchSpec(
        name="cnn",
        model_class=CNN,
        input_kind="text_ids",
        defaults=CNN_DEFAULTS,
        loss_class=MSECosineLoss,
        batch_format="pairs",
        train_defaults={"optimizer": "adam", "lr": 1e-3, "batch_size": 32, "negatives": 3, "epochs": 10},
        description="CNN (Bogdanova et al. 2015): sum-pooled CNN, cosine, MSE against 1/0 labels, tuned threshold",
    )
)
