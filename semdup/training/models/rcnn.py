"""RCNN: the gated non-consecutive convolution encoder of Lei et al. 2016 (§4.1).

Each field (title, body) is read token by token into states ``h_t`` by n-gram accumulators with a
learned, input-dependent decay; the states are pooled (mean or last), and the title and body
vectors are averaged. Posts are compared by the cosine of these vectors.

The recurrence over time is written once, in :class:`GatedRecurrence`, as a TorchScript-able
module: training runs it eagerly, export scripts it so the loop becomes one ONNX ``Loop`` with a
dynamic trip count (dynamic batch and length; the torch.export-based exporter cannot trace a loop
over a dynamic length, so :meth:`RCNN.dense_encoder` asks for the TorchScript exporter).

Example::

    >>> model = RCNN(vocab_size=100, emb_dim=8, hidden_dim=16)
    >>> enc = model.dense_encoder()                      # scripted; export with dynamo=False
    >>> enc(torch.tensor([[5, 6, 0]]), torch.tensor([[7, 8, 9]])).shape
    torch.Size([1, 16])
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from semdup.core.errors import ConfigError
from semdup.core.text_pipeline import PAD_ID, TextPipeline
from semdup.training.losses.max_margin import MaxMarginLoss
from semdup.training.models._base import Encoded, EncoderModel
from semdup.training.models.bow_cnn import initial_embeddings
from semdup.training.registry import ArchSpec, register

__all__ = ["RCNN", "GatedRecurrence", "RCNNEncoder", "PRETRAIN_FORMAT", "load_pretrained_encoder"]

logger = logging.getLogger(__name__)

# The file experiments.rcnn_pretraining.pretrain_rcnn writes; read here, by the model it initialises.
PRETRAIN_FORMAT = "semdup-rcnn-pretrain-v1"

POOLINGS = ("mean", "last")


class GatedRecurrence(nn.Module):
    """Adaptive gated decay over n-gram accumulators (Lei et al. 2016, §4.1 "Adaptive Gated Decay").

    For t = 1..L, with ``x_t`` the token embedding::

        λ_t      = σ(W_λ x_t + U h_{t−1} + b_λ)
        c⁽¹⁾_t   = λ_t ⊙ c⁽¹⁾_{t−1} + (1 − λ_t) ⊙ (W₁ x_t)
        c⁽ᵏ⁾_t   = λ_t ⊙ c⁽ᵏ⁾_{t−1} + (1 − λ_t) ⊙ (c⁽ᵏ⁻¹⁾_{t−1} + W_k x_t)     k = 2..n
        h_t      = tanh(c⁽ⁿ⁾_t + b)

    A padding step (mask 0) leaves every state unchanged, so a post's states do not depend on how
    much padding its batch carries.

    Args:
        input_dim: size of x_t.
        hidden_dim: size of h_t and of each accumulator c⁽ᵏ⁾.
        order: n, the n-gram order (the paper's best model uses n = 2).

    Shapes:
        forward(x [B, L, input_dim] float, mask [B, L] float 0/1, h0 [B, H], c0 [B, n, H])
        → (Σ_t mask_t·h_t [B, H], last real state [B, H]); :meth:`all_states` gives h_t [B, L, H].
    """

    def __init__(self, input_dim: int, hidden_dim: int, order: int = 2) -> None:
        super().__init__()
        if order < 1:
            raise ValueError(f"order (n-gram order n) must be >= 1; got {order}")
        self.hidden_dim = hidden_dim
        self.order = order
        # W_λ x + b_λ and W_1 x .. W_n x in one matmul over the whole sequence: only U h_{t−1} is sequential.
        self.input_proj = nn.Linear(input_dim, hidden_dim * (order + 1))
        self.state_proj = nn.Linear(hidden_dim, hidden_dim, bias=False)  # U
        self.bias = nn.Parameter(torch.zeros(hidden_dim))  # b

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The non-sequential part: ``W_λ x_t + b_λ`` [B, L, H] and ``W_k x_t`` [B, L, n, H] for all t at once."""
        batch = x.shape[0]
        length = x.shape[1]
        proj = self.input_proj(x).view(batch, length, self.order + 1, self.hidden_dim)  # (B, L, n+1, H)
        return proj[:, :, 0], proj[:, :, 1:]

    def step(
        self, gate_in: torch.Tensor, feats: torch.Tensor, m: torch.Tensor, h: torch.Tensor, c: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One time step: gate_in [B, H], feats [B, n, H], mask m [B, 1], h [B, H], c [B, n, H] → (h, c)."""
        lam = torch.sigmoid(gate_in + self.state_proj(h)).unsqueeze(1)  # (B, 1, H)
        lower = torch.cat([torch.zeros_like(c[:, :1]), c[:, :-1]], dim=1)  # (B, n, H)  c⁽ᵏ⁻¹⁾_{t−1}, c⁽⁰⁾ = 0
        c_new = lam * c + (1.0 - lam) * (lower + feats)  # (B, n, H)
        h_new = torch.tanh(c_new[:, -1] + self.bias)  # (B, H)
        c = m.unsqueeze(2) * c_new + (1.0 - m.unsqueeze(2)) * c  # padding step: keep the old state
        h = m * h_new + (1.0 - m) * h
        return h, c

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(Σ_t mask_t·h_t [B, H], last real state h [B, H]); no per-step outputs, so export has no scan outputs."""
        gate_in, feats = self.project(x)
        h = h0
        c = c0
        total = torch.zeros_like(h0)
        if torch.jit.is_scripting():
            # Exported path (inference only): plain indexing becomes Gather inside one ONNX Loop.
            for t in range(x.shape[1]):
                m = mask[:, t].unsqueeze(1)  # (B, 1)
                h, c = self.step(gate_in[:, t], feats[:, t], m, h, c)
                total = total + m * h
            return total, h
        # Eager path (training): unbind once, because the backward of x[:, t] allocates a full-size
        # zero tensor per step, which makes training time quadratic in the length.
        for g, f, m in zip(gate_in.unbind(1), feats.unbind(1), mask.unsqueeze(2).unbind(1)):  # noqa: B905 - TorchScript has no zip(strict=)
            h, c = self.step(g, f, m, h, c)
            total = total + m * h
        return total, h

    def all_states(self, x: torch.Tensor, mask: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor) -> torch.Tensor:
        """Every state h_t [B, L, H] (the pre-training decoder reads them; never exported)."""
        gate_in, feats = self.project(x)
        h, c = h0, c0
        states = []
        for g, f, m in zip(gate_in.unbind(1), feats.unbind(1), mask.unsqueeze(2).unbind(1)):  # noqa: B905
            h, c = self.step(g, f, m, h, c)
            states.append(h)
        return torch.stack(states, dim=1) if states else x.new_zeros((x.shape[0], 0, self.hidden_dim))


class RCNNEncoder(nn.Module):
    """Post ids → vector: embed, run the gated recurrence on title and body apart, pool, average.

    This is the dense encoder that is exported: ``forward(title_ids [B, Lt], body_ids [B, Lb]) → [B, H]``.
    A field with no token contributes nothing; the vector is the mean over the fields a post has.
    """

    def __init__(
        self, embedding: nn.Embedding, recurrence: nn.Module, pooling: str, dropout: float, hidden_dim: int
    ) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}; got {pooling!r}")
        self.embedding = embedding
        self.recurrence = recurrence
        self.mean_pooling = pooling == "mean"
        self.dropout = nn.Dropout(dropout)
        self.hidden_dim = hidden_dim

    def encode_field(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One field's pooled vector [B, H] and whether the field has any token [B, 1]."""
        mask = (ids != 0).to(torch.float32)  # (B, L)
        x = self.dropout(self.embedding(ids))  # (B, L, E)
        batch = ids.shape[0]
        h0 = torch.zeros((batch, self.hidden_dim), dtype=x.dtype, device=x.device)
        c0 = torch.zeros((batch, self.recurrence.order, self.hidden_dim), dtype=x.dtype, device=x.device)
        total, last = self.recurrence(x, mask, h0, c0)  # (B, H), (B, H)
        count = mask.sum(dim=1, keepdim=True)  # (B, 1)
        present = (count > 0).to(torch.float32)  # (B, 1)
        if self.mean_pooling:
            pooled = total / torch.clamp(count, min=1.0)  # (B, H)
        else:
            pooled = last * present  # (B, H): padding steps carry the last real state
        return self.dropout(pooled), present

    def forward(self, title_ids: torch.Tensor, body_ids: torch.Tensor) -> torch.Tensor:
        title, has_title = self.encode_field(title_ids)  # (B, H), (B, 1)
        body, has_body = self.encode_field(body_ids)
        return (title + body) / torch.clamp(has_title + has_body, min=1.0)  # (B, H)


class RCNN(EncoderModel):
    """Lei et al.'s RCNN question encoder, scored by cosine: ``s = cos(E(q), E(p))``.

    Hyper-parameters (``hparams``, defaults in :data:`RCNN_DEFAULTS`):
        emb_dim: word-vector size (50 with GloVe 6B 50-d; the paper used 200-d word2vec).
        hidden_dim: size of h_t and of the post vector (paper: 400; 200 keeps 2-core training in minutes).
        order: n-gram order n of the accumulators (paper: 2).
        pooling: ``"mean"`` or ``"last"`` state (Table 4 of the paper: last slightly better for RCNN).
        dropout: on embeddings and pooled vectors (paper range 0.1–0.3).
        word_vectors: ``"glove"``, ``"word2vec"`` or ``"none"`` (initial word vectors).
        freeze_embeddings: keep word vectors fixed, as the paper did (avoids over-fitting small data).
        pretrained_encoder: path of a body→title pre-training file written by
            :func:`experiments.rcnn_pretraining.pretrain_rcnn` ("" for none); its recurrence weights and
            the word vectors of shared words are loaded, and its shape settings must match.
        seed: seed of the noise for words without a pre-trained vector.

    References:
        Lei et al., *Semi-supervised Question Retrieval with Gated Convolutions*, NAACL 2016, §4.1
        (encoder), §3 (max-margin loss), §4.2 (pre-training). https://aclanthology.org/N16-1153/

    Shapes:
        dense encoder: (title_ids [B, Lt] int64, body_ids [B, Lb] int64) → [B, hidden_dim] float.
    """

    input_kind = "title_body_ids"

    def __init__(
        self,
        vocab_size: int,
        emb_dim: int = 50,
        hidden_dim: int = 200,
        order: int = 2,
        pooling: str = "mean",
        dropout: float = 0.1,
        embeddings: np.ndarray | None = None,
        freeze_embeddings: bool = True,
    ) -> None:
        super().__init__()
        embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=0)
        if embeddings is not None:
            if tuple(embeddings.shape) != (vocab_size, emb_dim):
                raise ValueError(f"embeddings must have shape {(vocab_size, emb_dim)}; got {tuple(embeddings.shape)}")
            with torch.no_grad():
                embedding.weight.copy_(torch.as_tensor(np.asarray(embeddings), dtype=torch.float32))
                embedding.weight[0].zero_()
        embedding.weight.requires_grad_(not freeze_embeddings)
        self.encoder = RCNNEncoder(
            embedding, GatedRecurrence(emb_dim, hidden_dim, order), pooling, dropout, hidden_dim
        )
        self.hparams = {
            **RCNN_DEFAULTS,
            "emb_dim": int(emb_dim),
            "hidden_dim": int(hidden_dim),
            "order": int(order),
            "pooling": pooling,
            "dropout": float(dropout),
            "freeze_embeddings": bool(freeze_embeddings),
        }

    @classmethod
    def from_hparams(cls, hparams: Mapping[str, Any], pipeline: TextPipeline, pretrained: bool = True) -> RCNN:
        h = {**RCNN_DEFAULTS, **dict(hparams)}
        unknown = set(h) - set(RCNN_DEFAULTS)
        if unknown:
            raise ConfigError(f"unknown rcnn hyper-parameters {sorted(unknown)}; known: {sorted(RCNN_DEFAULTS)}")
        emb = (
            initial_embeddings(pipeline, h["word_vectors"], int(h["emb_dim"]), int(h["seed"])) if pretrained else None
        )
        model = cls(
            len(pipeline.vocab),
            emb_dim=int(h["emb_dim"]),
            hidden_dim=int(h["hidden_dim"]),
            order=int(h["order"]),
            pooling=str(h["pooling"]),
            dropout=float(h["dropout"]),
            embeddings=emb,
            freeze_embeddings=bool(h["freeze_embeddings"]),
        )
        model.hparams = h
        if pretrained and h["pretrained_encoder"]:
            load_pretrained_encoder(model, pipeline, h["pretrained_encoder"])
        return model

    def encode(self, inputs: Mapping[str, Tensor]) -> Encoded:
        """Eager encoding for training (dropout on in train mode); same maths as the exported encoder."""
        return Encoded(dense=self.encoder(inputs["title_ids"], inputs["body_ids"]))

    def dense_encoder(self) -> nn.Module:
        """The encoder scripted (eval mode, no dropout), for ``torch.onnx.export(..., dynamo=False)``.

        The recurrence loops over a dynamic length, which the torch.export-based exporter cannot
        trace; the scripted module exports it as one ONNX ``Loop``. ``onnx_exporter = "torchscript"``
        on the returned module tells export to pass ``dynamo=False``. Weights are shared with this model.
        """
        enc = RCNNEncoder(
            self.encoder.embedding,
            self.encoder.recurrence,
            "mean" if self.encoder.mean_pooling else "last",
            0.0,
            self.encoder.hidden_dim,
        ).eval()
        scripted = torch.jit.script(enc)
        scripted.onnx_exporter = "torchscript"
        return scripted

    def term_weights(self) -> np.ndarray | None:
        """None: RCNN has no bag-of-words path."""
        return None

    def fusion(self) -> dict[str, float]:
        """Dense cosine only (Lei et al. score by cosine alone)."""
        return {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.0}


RCNN_DEFAULTS: dict[str, Any] = {
    "emb_dim": 50,
    "hidden_dim": 200,
    "order": 2,
    "pooling": "mean",
    "dropout": 0.1,
    "word_vectors": "glove",
    "freeze_embeddings": True,
    "pretrained_encoder": "",
    "seed": 0,
}

register(
    ArchSpec(
        name="rcnn",
        model_class=RCNN,
        input_kind="title_body_ids",
        defaults=RCNN_DEFAULTS,
        loss_class=MaxMarginLoss,
        loss_defaults={"margin": 0.2},
        batch_format="groups",
        train_defaults={"optimizer": "adam", "lr": 1e-3, "batch_size": 16, "negatives": 20, "epochs": 8},
        pipeline_defaults={"max_tokens": 60},
        description="RCNN (Lei et al. 2016): gated non-consecutive convolution over title and body, max-margin loss",
    )
)


def load_pretrained_encoder(model: RCNN, pipeline: TextPipeline, path: str | Path) -> dict[str, int]:
    """Load a pre-training file into ``model``: recurrence weights, and word vectors of shared words.

    Raises:
        ConfigError: the file is missing or not a pre-training file, or its shape settings differ.
    """
    try:
        payload = torch.load(Path(path), map_location="cpu", weights_only=True)
    except (OSError, RuntimeError) as exc:
        raise ConfigError(
            f"cannot read the RCNN pre-training file {path}: {exc}; make one with "
            "pretrain_rcnn() ('python -m experiments.pretrain_rcnn --out PATH' in a checkout)"
        ) from exc
    if not isinstance(payload, dict) or payload.get("format") != PRETRAIN_FORMAT:
        raise ConfigError(f"{path} is not an RCNN pre-training file (expected format {PRETRAIN_FORMAT})")
    for key in ("emb_dim", "hidden_dim", "order"):
        if int(payload["hparams"][key]) != int(model.hparams[key]):
            raise ConfigError(
                f"pre-trained RCNN has {key}={payload['hparams'][key]} but this model has {key}={model.hparams[key]}; "
                f"set --set {key}={payload['hparams'][key]} or pre-train with the same setting"
            )
    model.encoder.recurrence.load_state_dict(payload["recurrence"])
    src = {t: i for i, t in enumerate(payload["tokens"])}
    rows = [(i, src[t]) for i, t in enumerate(pipeline.vocab.itos) if t in src and i != PAD_ID]
    if rows:
        dst_idx = torch.tensor([r[0] for r in rows])
        src_idx = torch.tensor([r[1] for r in rows])
        with torch.no_grad():
            model.encoder.embedding.weight[dst_idx] = payload["embedding"][src_idx]
    logger.info("loaded pre-trained RCNN %s: %d of %d words share a vector", path, len(rows), len(pipeline.vocab))
    return {"shared_words": len(rows), "vocab_size": len(pipeline.vocab)}
