"""SCQA and T-SCQA (Das et al. 2016): a siamese CNN over letter-trigram word hashing.

    word vector  w_j  = Σ_{g ∈ trigrams(word_j)} E[g]                    word hashing (§3.1)
    3 ×          x    = ReLU(maxpool₂(conv_k(x)))                          (§3.2–3.4)
    v(q)         = W · max_j x_j + b  ∈ R^128                             fully connected (§3.5)
    SCQA         s(q, c) = cos(v(q), v(c))          (both sides share every weight: siamese)
    T-SCQA       s(q, c) = α · cos(v(q), v(c)) + (1 − α) · lexnorm(q, c)    (§6, eq. 3; α = 0.8 in the paper)

One deliberate change from the paper: it convolves over the hashed trigram-count vector of the
whole text (a width-10 filter over 48,536 hash buckets, max-pooling width 100). Hash buckets have
no order, so neighbouring buckets share nothing; we convolve over word positions instead, each
word being the sum of its trigram vectors (the CLSM layout the paper's word hashing comes from).
The hashing, the depth (3 × conv, max-pool, ReLU), the 128-d output, the shared weights and the
contrastive loss are the paper's.

Padding never changes a post's vector: padded words are zero, are left out of every max-pool,
and are zeroed after each layer, so a post alone and in a padded batch encode the same.

Reference: A. Das, H. Yenala, M. Chinnakotla, M. Shrivastava, "Together We Stand: Siamese Networks
for Similar Question Retrieval", ACL 2016, §3 (architecture), §4 (loss), §6 (T-SCQA).

Example::

    >>> model = SCQA.from_hparams({}, pipeline)         # pipeline with trigram_buckets > 0
    >>> enc = model.dense_encoder()                     # trigram_ids [B, L, T] -> [B, 128]
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
from semdup.training.losses.contrastive import ContrastiveLoss
from semdup.training.models._base import EncoderModel
from semdup.training.registry import ArchSpec, register

__all__ = ["SCQA", "TrigramCNNEncoder", "SCQA_DEFAULTS", "T_SCQA_DEFAULTS"]

logger = logging.getLogger(__name__)

_MASKED = -1e9  # below any convolution output: a padded position never wins a max


def _max_pool(x: Tensor, pool: int, fill: float) -> Tensor:
    """Non-overlapping max-pool of width ``pool`` over the last axis, the last window possibly short.

    [B, C, L] → [B, C, ⌈L/pool⌉]. Written as a running max over shifted slices, then every
    pool-th step, because ``max_pool1d`` (with or without ``ceil_mode``) and ``unfold`` make
    torch.export tie L to the example's length or parity (no dynamic length in ONNX).
    """
    length = x.shape[2]
    padded = nn.functional.pad(x, (0, pool - 1), value=fill)  # (B, C, L + pool − 1)
    running = padded[:, :, :length]
    for i in range(1, pool):
        running = torch.maximum(running, padded[:, :, i : i + length])  # (B, C, L): max of x[t .. t+pool−1]
    return running[:, :, ::pool]  # (B, C, ⌈L/pool⌉)


class TrigramCNNEncoder(nn.Module):
    """trigram_ids [B, L, T] → [B, out_dim]: word hashing, 3 × (conv, max-pool, ReLU), max over words, FC.

    Args:
        buckets: trigram hash buckets (ids 1..buckets; 0 is padding).
        trigram_dim: size of a trigram vector (and so of a word vector).
        conv_units: filters of each convolution layer.
        window: convolution width in words (odd, "same" padding).
        pool: max-pooling width and stride in words.
        layers: how many (conv, max-pool, ReLU) blocks (the paper: 3).
        out_dim: size of the semantic vector (the paper: 128).
    """

    def __init__(
        self,
        buckets: int,
        trigram_dim: int = 64,
        conv_units: int = 128,
        window: int = 3,
        pool: int = 2,
        layers: int = 3,
        out_dim: int = 128,
    ) -> None:
        super().__init__()
        if window % 2 != 1:
            raise ValueError(f"window must be odd so the convolution keeps the length; got {window}")
        self.trigram = nn.Embedding(buckets + 1, trigram_dim, padding_idx=PAD_ID)
        dims = [trigram_dim] + [conv_units] * layers
        self.convs = nn.ModuleList(
            nn.Conv1d(dims[i], dims[i + 1], kernel_size=window, padding=window // 2) for i in range(layers)
        )
        self.pool = pool
        self.fc = nn.Linear(conv_units, out_dim)

    def forward(self, trigram_ids: Tensor) -> Tensor:
        words = self.trigram(trigram_ids).sum(dim=2)  # (B, L, E): word hashing, a word = Σ of its trigrams
        mask = (trigram_ids != PAD_ID).any(dim=2).to(words.dtype).unsqueeze(1)  # (B, 1, L)
        x = words.transpose(1, 2)  # (B, E, L)
        for conv in self.convs:
            h = conv(x)  # (B, U, L)
            h = torch.where(mask > 0, h, torch.full_like(h, _MASKED))
            h = _max_pool(h, self.pool, _MASKED)  # (B, U, ⌈L/p⌉)
            mask = _max_pool(mask, self.pool, 0.0)  # (B, 1, ⌈L/p⌉)
            x = torch.relu(h) * mask  # (B, U, ⌈L/p⌉), padding back to exact zeros
        pooled = x.max(dim=2).values  # (B, U): ReLU outputs are ≥ 0, so zeroed padding never wins
        return self.fc(pooled)  # (B, out_dim)


class SCQA(EncoderModel):
    """Siamese CNN for cQA over letter trigrams (see the module docstring for the formulas).

    Hyper-parameters (``hparams``, defaults in :data:`SCQA_DEFAULTS`): ``trigram_dim`` (64),
    ``conv_units`` (128), ``window`` (3), ``pool`` (2), ``layers`` (3), ``out_dim`` (128, the paper's),
    ``tscqa_alpha`` (None for SCQA: the score is the cosine alone; a number in [0, 1] for T-SCQA:
    ``α·cos + (1−α)·lexnorm``, the paper's best α = 0.8, tuned on dev here).

    Shapes:
        dense encoder: trigram_ids [B, L, T] int64 → [B, out_dim] float.
    """

    input_kind = "trigram_ids"

    def __init__(
        self,
        buckets: int,
        trigram_dim: int = 64,
        conv_units: int = 128,
        window: int = 3,
        pool: int = 2,
        layers: int = 3,
        out_dim: int = 128,
        tscqa_alpha: float | None = None,
    ) -> None:
        super().__init__()
        if buckets <= 0:
            raise ConfigError(
                "SCQA needs letter-trigram hashing but the text pipeline has trigram_buckets=0; "
                "train with the scqa architecture's pipeline defaults (trigram_buckets=16384)"
            )
        if tscqa_alpha is not None and not 0.0 <= float(tscqa_alpha) <= 1.0:
            raise ValueError(f"tscqa_alpha must lie in [0, 1] (or be None for plain SCQA); got {tscqa_alpha}")
        self.encoder = TrigramCNNEncoder(buckets, trigram_dim, conv_units, window, pool, layers, out_dim)
        self.set_tscqa_alpha(tscqa_alpha)
        self.hparams = {
            "trigram_dim": trigram_dim,
            "conv_units": conv_units,
            "window": window,
            "pool": pool,
            "layers": layers,
            "out_dim": out_dim,
            "tscqa_alpha": tscqa_alpha,
        }

    def set_tscqa_alpha(self, tscqa_alpha: float | None) -> None:
        """Set T-SCQA's α: ``β_dense = α`` and the lexical weight ``1 − α`` (None: cosine alone)."""
        a = None if tscqa_alpha is None else float(tscqa_alpha)
        self.beta_dense = 1.0 if a is None else a
        self.alpha = 0.0 if a is None else 1.0 - a
        if getattr(self, "hparams", None):
            self.hparams["tscqa_alpha"] = a

    @classmethod
    def from_hparams(cls, hparams: Mapping[str, Any], pipeline: TextPipeline, pretrained: bool = True) -> SCQA:
        h = {**SCQA_DEFAULTS, **dict(hparams)}
        unknown = set(h) - set(SCQA_DEFAULTS)
        if unknown:
            raise ConfigError(f"unknown scqa hyper-parameters {sorted(unknown)}; known: {sorted(SCQA_DEFAULTS)}")
        alpha = h["tscqa_alpha"]
        model = cls(
            int(pipeline.settings.trigram_buckets),
            trigram_dim=int(h["trigram_dim"]),
            conv_units=int(h["conv_units"]),
            window=int(h["window"]),
            pool=int(h["pool"]),
            layers=int(h["layers"]),
            out_dim=int(h["out_dim"]),
            tscqa_alpha=None if alpha in (None, "", "none") else float(alpha),
        )
        return model

    def dense_encoder(self) -> nn.Module:
        return self.encoder

    def term_weights(self) -> np.ndarray | None:
        """None: SCQA has no bag-of-words path (T-SCQA's lexical term comes from the search engine)."""
        return None

    def fusion(self) -> dict[str, float]:
        """SCQA: cosine alone; T-SCQA: ``β_dense = α``, lexical weight ``1 − α``."""
        return {"beta_bow": 0.0, "beta_dense": float(self.beta_dense), "alpha": float(self.alpha)}


SCQA_DEFAULTS: dict[str, Any] = {
    "trigram_dim": 64,
    "conv_units": 128,
    "window": 3,
    "pool": 2,
    "layers": 3,
    "out_dim": 128,
    "tscqa_alpha": None,
}
T_SCQA_DEFAULTS: dict[str, Any] = {**SCQA_DEFAULTS, "tscqa_alpha": 0.8}

_SCQA_TRAIN = {"optimizer": "adam", "lr": 1e-3, "batch_size": 32, "epochs": 10}
_SCQA_PIPELINE = {"trigram_buckets": 16384, "max_trigrams_per_word": 16}

register(
    ArchSpec(
        name="scqa",
        model_class=SCQA,
        input_kind="trigram_ids",
        defaults=SCQA_DEFAULTS,
        loss_class=ContrastiveLoss,
        loss_defaults={"margin": 0.3},
        batch_format="pairs",
        train_defaults=_SCQA_TRAIN,
        pipeline_defaults=_SCQA_PIPELINE,
        description="SCQA (Das et al. 2016): siamese letter-trigram CNN, contrastive loss, cosine score",
    )
)
register(
    ArchSpec(
        name="t-scqa",
        model_class=SCQA,
        input_kind="trigram_ids",
        defaults=T_SCQA_DEFAULTS,
        loss_class=ContrastiveLoss,
        loss_defaults={"margin": 0.3},
        batch_format="pairs",
        train_defaults=_SCQA_TRAIN,
        pipeline_defaults=_SCQA_PIPELINE,
        description="T-SCQA (Das et al. 2016): SCQA interpolated with the lexical score, α·cos + (1−α)·lexnorm",
    )
)
