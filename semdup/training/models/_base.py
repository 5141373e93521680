"""The interface every trainable architecture implements, and the fused score in torch.

A model is an ``nn.Module`` that encodes posts into an :class:`Encoded` (a dense vector from its
exportable dense encoder and/or the ids of its bag-of-words path) and scores pairs with

    s = β_bow · cos(tf(q)∘t, tf(c)∘t) + β_dense · cos(E(q), E(c)) + α · lexnorm

exactly as :func:`semdup.core.scoring.fused_scores` does in numpy at serving time
(dos Santos et al. 2015, §3.3; Das et al. 2016, §3.4).

Subclasses set ``input_kind`` and implement ``from_hparams`` and ``dense_encoder``; a model with
a BOW path holds its term weights as the parameter ``self.term_weight`` ([|V|], initialised to
IDF) and sets ``self.uses_bow = True``. Fusion weights come from ``beta_bow``/``beta_dense``/``alpha``
attributes (floats or parameters).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from semdup.core.inputs import input_names
from semdup.core.text_pipeline import UNK_ID, TextPipeline

__all__ = ["Encoded", "EncoderModel", "bow_cosine", "dense_cosine"]

logger = logging.getLogger(__name__)


@dataclass
class Encoded:
    """A batch of encoded posts: any of the two parts may be None.

    Attributes:
        dense: [B, D] dense vectors from the dense encoder.
        bow_ids: [B, L] vocabulary ids of the BOW path (0 = padding).
        bow_weight: [B, L] per-token weight t[id] (0 for padding and unknown).
        bow_norm: [B] ‖tf∘t‖.
    """

    dense: Tensor | None = None
    bow_ids: Tensor | None = None
    bow_weight: Tensor | None = None
    bow_norm: Tensor | None = None

    def repeat_rows(self, repeats: int) -> Encoded:
        """Each row repeated ``repeats`` times in place (row i → rows i*r .. i*r+r-1)."""

        def rep(x: Tensor | None) -> Tensor | None:
            return None if x is None else x.repeat_interleave(repeats, dim=0)

        return Encoded(rep(self.dense), rep(self.bow_ids), rep(self.bow_weight), rep(self.bow_norm))


def _bow_dot(ids_a: Tensor, w_a: Tensor, ids_b: Tensor, w_b: Tensor) -> Tensor:
    """Σ_w tf_a(w)·tf_b(w)·t_w² computed over token pairs with equal ids. [B]."""
    eq = (ids_a.unsqueeze(2) == ids_b.unsqueeze(1)).to(w_a.dtype)  # (B, La, Lb)
    return torch.einsum("bi,bij,bj->b", w_a, eq, w_b)


def bow_cosine(q: Encoded, c: Encoded) -> Tensor:
    """cos(tf(q)∘t, tf(c)∘t) per row [B]; 0 where either side has no known word."""
    dot = _bow_dot(q.bow_ids, q.bow_weight, c.bow_ids, c.bow_weight)  # (B,)
    return dot / (q.bow_norm * c.bow_norm).clamp_min(1e-8)


def dense_cosine(q: Tensor, c: Tensor) -> Tensor:
    """Row-wise cosine [B] of [B, D] tensors."""
    return nn.functional.cosine_similarity(q, c, dim=-1, eps=1e-8)


class EncoderModel(nn.Module):
    """Base of every architecture: encode posts, score pairs, expose the exportable parts."""

    input_kind: ClassVar[str] = "text_ids"
    uses_bow: bool = False

    def __init__(self) -> None:
        super().__init__()
        self.hparams: dict[str, Any] = {}

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def from_hparams(cls, hparams: Mapping[str, Any], pipeline: TextPipeline, pretrained: bool = True) -> EncoderModel:
        """Build a fresh model; ``pretrained=False`` skips loading word vectors (a checkpoint follows)."""
        raise NotImplementedError

    # --- the exportable parts -----------------------------------------------------------------
    def dense_encoder(self) -> nn.Module | None:
        """The module exported to ONNX: forward(*inputs named by input_names(kind)) -> [B, D]."""
        return None

    def term_weights(self) -> np.ndarray | None:
        """t as a float32 numpy array [|V|], or None without a BOW path."""
        if not self.uses_bow:
            return None
        return self.term_weight.detach().cpu().numpy().astype(np.float32)

    def fusion(self) -> dict[str, float]:
        """The fusion weights β_bow, β_dense, α as floats (what serving multiplies by)."""

        def val(name: str, default: float) -> float:
            v = getattr(self, name, default)
            return float(v.detach().cpu()) if isinstance(v, Tensor) else float(v)

        return {
            "beta_bow": val("beta_bow", 1.0) if self.uses_bow else 0.0,
            "beta_dense": val("beta_dense", 1.0) if self.dense_encoder() is not None else 0.0,
            "alpha": val("alpha", 0.0),
        }

    def scale_dense(self, factor: float) -> None:
        """β_dense ← β_dense × factor, in the model itself, so the checkpoint's fusion carries a dev choice."""
        beta = getattr(self, "beta_dense", 1.0)
        if isinstance(beta, nn.Parameter):
            with torch.no_grad():
                beta.mul_(factor)
        else:
            self.beta_dense = float(beta) * factor

    def get_config_dict(self) -> dict[str, Any]:
        """Hyper-parameters, enough for ``from_hparams`` to rebuild the model."""
        return dict(self.hparams)

    # --- training-time scoring ----------------------------------------------------------------
    def encode(self, inputs: Mapping[str, Tensor]) -> Encoded:
        """Encode one batch of posts (inputs from :func:`semdup.core.inputs.build_inputs`)."""
        out = Encoded()
        enc = self.dense_encoder()
        if enc is not None:
            out.dense = enc(*[inputs[n] for n in input_names(self.input_kind)])
        if self.uses_bow:
            ids = inputs["bow_ids"]  # (B, L)
            known = (ids > UNK_ID).to(self.term_weight.dtype)  # (B, L) padding and unknown count 0
            w = self.term_weight[ids] * known  # (B, L)
            norm = _bow_dot(ids, w, ids, w).clamp_min(0).sqrt()  # (B,)
            out.bow_ids, out.bow_weight, out.bow_norm = ids, w, norm
        return out

    def _fusion_tensor(self, name: str, default: float) -> Tensor | float:
        return getattr(self, name, default)

    def score_encoded(self, q: Encoded, c: Encoded, lexnorm: Tensor | None = None) -> Tensor:
        """Fused score [B] of row-aligned encoded queries and candidates."""
        s: Tensor | float = 0.0
        if self.uses_bow:
            s = s + self._fusion_tensor("beta_bow", 1.0) * bow_cosine(q, c)
        if q.dense is not None:
            s = s + self._fusion_tensor("beta_dense", 1.0) * dense_cosine(q.dense, c.dense)
        if lexnorm is not None:
            s = s + self._fusion_tensor("alpha", 0.0) * lexnorm
        return s

    def score(
        self, batch_q: Mapping[str, Tensor], batch_c: Mapping[str, Tensor], lexnorm: Tensor | None = None
    ) -> Tensor:
        """Fused score [B] of (query i, candidate i) pairs."""
        return self.score_encoded(self.encode(batch_q), self.encode(batch_c), lexnorm)
