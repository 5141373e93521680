"""BOW-CNN (dos Santos et al. 2015): a learned-weight bag of words plus a max-pooled convolution.

    r_bow(q)  = tf(q) ∘ t                     t ∈ R^|V| learned, initialised to IDF (§3.2)
    r_conv(q) = tanh(max_j (W · [e_{j-1}; e_j; e_{j+1}] + b))   window k = 3, edge padding (§3.1)
    s(q, c)   = β1 · cos(r_bow(q), r_bow(c)) + β2 · cos(r_conv(q), r_conv(c))   β learned (§3.3)

Reference: C. dos Santos, L. Barbosa, D. Bogdanova, B. Zadrozny, "Learning Hybrid Representations
to Retrieve Semantically Equivalent Questions", ACL 2015, §3 (model) and §4 (training).

Example::

    >>> model = BowCNN.from_hparams({"emb_dim": 50, "conv_units": 400}, pipeline)
    >>> scores = model.score(batch_q, batch_c)            # [B]
    >>> onnx_module = model.dense_encoder()               # ids [B, L] -> [B, 400]
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from semdup.core.errors import ConfigError
from semdup.core.text_pipeline import PAD_ID, UNK_ID, TextPipeline
from semdup.training.losses.bow_cnn_logistic import BowCNNLogisticLoss
from semdup.training.models._base import Encoded, EncoderModel, dense_cosine
from semdup.training.registry import ArchSpec, register

__all__ = ["BowCNN", "ConvMaxEncoder", "initial_embeddings"]

logger = logging.getLogger(__name__)


def initial_embeddings(pipeline: TextPipeline, source: str, dim: int, seed: int) -> np.ndarray | None:
    """Pre-trained rows for the vocabulary (``"glove"``/``"word2vec"``), or None for random init (``"none"``)."""
    if source in ("", "none", None):
        return None
    from semdup.training.word_vectors import embedding_matrix  # the other helper's module; gensim-heavy

    matrix = embedding_matrix(pipeline.vocab, source, seed=seed)
    if matrix.shape[1] != dim:
        raise ConfigError(
            f"word vectors {source!r} have {matrix.shape[1]} dimensions but emb_dim={dim}; "
            f"set emb_dim={matrix.shape[1]} or word_vectors=none"
        )
    return matrix


class ConvMaxEncoder(nn.Module):
    """ids [B, L] → tanh(max over positions of a width-k convolution) [B, units] (the exportable part).

    Padding positions are left out of the max (a post with no token gives tanh(0) = 0). Edge
    padding is a zero vector each side, as the paper's "padding at the edges".

    Args:
        vocab_size: rows of the embedding table (row 0 is padding).
        emb_dim: word vector size (50 for GloVe 6B 50-d; the paper used 200).
        units: convolution filters (400 in BOW-CNN, 1000 for CNN alone).
        window: convolution width k (3).
        embeddings: optional initial table [vocab_size, emb_dim].
        dropout: dropout on the word vectors while training (identity in eval mode and in ONNX).
        max_positions: the convolution reads only the first ``max_positions`` tokens (0 = all),
            so long posts can feed the bag of words in full at a fixed convolution cost.
    """

    def __init__(
        self,
        vocab_size: int,
        emb_dim: int,
        units: int,
        window: int = 3,
        embeddings: np.ndarray | None = None,
        dropout: float = 0.0,
        max_positions: int = 0,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        self.dropout = nn.Dropout(dropout)
        self.max_positions = int(max_positions)
        if embeddings is not None:
            with torch.no_grad():
                self.embedding.weight.copy_(torch.from_numpy(np.asarray(embeddings, dtype=np.float32)))
                self.embedding.weight[PAD_ID].zero_()
        self.conv = nn.Conv1d(emb_dim, units, kernel_size=window, padding=window // 2)

    def forward(self, ids: Tensor) -> Tensor:
        if self.max_positions > 0:
            ids = ids[:, : self.max_positions]  # a static slice: exports to ONNX as Slice
        mask = (ids != PAD_ID).unsqueeze(1)  # (B, 1, L)
        x = self.dropout(self.embedding(ids)).transpose(1, 2)  # (B, E, L)
        h = self.conv(x)  # (B, U, L)
        h = h.masked_fill(~mask, -1e4)  # padding never wins the max
        pooled = h.max(dim=2).values  # (B, U)
        any_token = mask.any(dim=2)  # (B, 1)
        return torch.tanh(pooled * any_token.to(pooled.dtype))  # (B, U)


class BowCNN(EncoderModel):
    """The hybrid BOW + CNN question representation of dos Santos et al. 2015 (see module docstring).

    Hyper-parameters (``hparams``): ``emb_dim`` (50), ``conv_units`` (400), ``window`` (3),
    ``word_vectors`` ("glove", "word2vec" or "none"), ``seed`` (embedding noise), ``beta_init`` (1.0),
    ``learn_term_weights`` (True; Table 5 of the paper: learned t beats fixed IDF),
    ``beta_dense_init`` (None = ``beta_init``; 0 starts the model at exactly TF-IDF cosine),
    ``dropout`` (on word vectors, 0.0), ``term_l2`` (0.0: weight of ‖t − IDF‖² added to the loss,
    so training cannot wander far from the IDF prior the BOW path starts from), ``conv_max_tokens``
    (0 = all; else the convolution reads only the first N tokens while the BOW path reads all),
    ``freeze_embeddings`` (False; True keeps the pre-trained word vectors fixed: most of the
    parameters, and what overfits a small training set first).
    """

    input_kind = "text_ids"
    uses_bow = True

    def __init__(
        self,
        vocab_size: int,
        idf: np.ndarray,
        emb_dim: int = 50,
        conv_units: int = 400,
        window: int = 3,
        embeddings: np.ndarray | None = None,
        beta_init: float = 1.0,
        learn_term_weights: bool = True,
        beta_dense_init: float | None = None,
        dropout: float = 0.0,
        term_l2: float = 0.0,
        conv_max_tokens: int = 0,
        freeze_embeddings: bool = False,
    ) -> None:
        super().__init__()
        self.encoder = ConvMaxEncoder(vocab_size, emb_dim, conv_units, window, embeddings, dropout, conv_max_tokens)
        self.encoder.embedding.weight.requires_grad_(not freeze_embeddings)
        idf_t = torch.as_tensor(np.asarray(idf, dtype=np.float32))
        self.term_weight = nn.Parameter(idf_t.clone())
        self.term_weight.requires_grad_(learn_term_weights)
        # The prior of the L2 penalty; not saved (rebuilt from the vocabulary on load).
        self.register_buffer("idf_prior", idf_t, persistent=False)
        self.term_l2 = float(term_l2)
        self.beta_bow = nn.Parameter(torch.tensor(float(beta_init)))
        dense0 = beta_init if beta_dense_init is None else beta_dense_init
        self.beta_dense = nn.Parameter(torch.tensor(float(dense0)))

    # --- training-time scoring: same maths as the base class, bags instead of token-pair equality ---
    def _bags(self, ids: Tensor, weight: Tensor) -> Tensor:
        """tf ∘ t as dense rows [B, |V|] (scatter of the per-token weights; O(B·L), not O(B·L²))."""
        bag = weight.new_zeros(ids.shape[0], self.term_weight.shape[0])
        return bag.scatter_add(1, ids, weight)

    def encode(self, inputs: Mapping[str, Tensor]) -> Encoded:
        ids = inputs["bow_ids"]  # (B, L)
        known = (ids > UNK_ID).to(self.term_weight.dtype)  # padding and unknown weigh 0
        w = self.term_weight[ids] * known  # (B, L)
        norm = self._bags(ids, w).norm(dim=1)  # (B,)
        return Encoded(dense=self.encoder(inputs["ids"]), bow_ids=ids, bow_weight=w, bow_norm=norm)

    def score_encoded(self, q: Encoded, c: Encoded, lexnorm: Tensor | None = None) -> Tensor:
        dot = (self._bags(q.bow_ids, q.bow_weight) * self._bags(c.bow_ids, c.bow_weight)).sum(dim=1)  # (B,)
        cos_bow = dot / (q.bow_norm * c.bow_norm).clamp_min(1e-8)
        return self.beta_bow * cos_bow + self.beta_dense * dense_cosine(q.dense, c.dense)

    def penalty(self) -> Tensor:
        """term_l2 · Σ (t − IDF)²: the trainer adds it to the loss (0 when term_l2 is 0)."""
        if not self.term_l2 or not self.term_weight.requires_grad:
            return self.term_weight.new_zeros(())
        return self.term_l2 * (self.term_weight - self.idf_prior).pow(2).sum()

    @classmethod
    def from_hparams(cls, hparams: Mapping[str, Any], pipeline: TextPipeline, pretrained: bool = True) -> BowCNN:
        h = {**BOW_CNN_DEFAULTS, **dict(hparams)}
        unknown = set(h) - set(BOW_CNN_DEFAULTS)
        if unknown:
            raise ConfigError(f"unknown bow-cnn hyper-parameters {sorted(unknown)}; known: {sorted(BOW_CNN_DEFAULTS)}")
        vocab = pipeline.vocab
        emb = initial_embeddings(pipeline, h["word_vectors"], h["emb_dim"], h["seed"]) if pretrained else None
        model = cls(
            len(vocab),
            np.asarray(vocab.idf(), dtype=np.float32),
            emb_dim=int(h["emb_dim"]),
            conv_units=int(h["conv_units"]),
            window=int(h["window"]),
            embeddings=emb,
            beta_init=float(h["beta_init"]),
            learn_term_weights=bool(h["learn_term_weights"]),
            beta_dense_init=None if h["beta_dense_init"] is None else float(h["beta_dense_init"]),
            dropout=float(h["dropout"]),
            term_l2=float(h["term_l2"]),
            conv_max_tokens=int(h["conv_max_tokens"]),
            freeze_embeddings=bool(h["freeze_embeddings"]),
        )
        model.hparams = h
        return model

    def dense_encoder(self) -> nn.Module:
        return self.encoder


BOW_CNN_DEFAULTS: dict[str, Any] = {
    "emb_dim": 50,
    "conv_units": 400,
    "window": 3,
    "word_vectors": "glove",
    "seed": 0,
    "beta_init": 1.0,
    "learn_term_weights": True,
    "beta_dense_init": None,
    "dropout": 0.0,
    "term_l2": 0.0,
    "conv_max_tokens": 0,
    "freeze_embeddings": False,
}

register(
    ArchSpec(
        name="bow-cnn",
        model_class=BowCNN,
        input_kind="text_ids",
        defaults=BOW_CNN_DEFAULTS,
        loss_class=BowCNNLogisticLoss,
        loss_defaults={"gamma": 10.0},
        batch_format="groups",
        train_defaults={"optimizer": "adam", "lr": 1e-3, "batch_size": 16, "negatives": 20, "epochs": 10},
        description="BOW-CNN (dos Santos et al. 2015): learned-IDF bag of words + max-pooled CNN, logistic loss",
    )
)
