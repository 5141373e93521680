"""The max-margin ranking loss of Lei et al. 2016 (§3): the hardest negative against the positive."""

from __future__ import annotations

import logging

import torch
from torch import nn

__all__ = ["MaxMarginLoss", "compute_max_margin_loss"]

logger = logging.getLogger(__name__)


def compute_max_margin_loss(pos_scores: torch.Tensor, neg_scores: torch.Tensor, margin: float) -> torch.Tensor:
    """Mean over queries of ``max(0, max_p s(q, p⁻) − s(q, p⁺) + δ)``.

    This is ``max_{p ∈ Q(q)} s(q, p; θ) − s(q, p⁺; θ) + δ(p, p⁺)`` with δ = margin for a negative
    and 0 for the positive itself (which makes the term never negative).

    Args:
        pos_scores: s(q, p⁺), shape (batch,).
        neg_scores: s(q, p⁻) for each query's negatives, shape (batch, n_negatives); a column of
            ``-inf`` marks a missing negative.
        margin: δ, same units as the scores (cosine here).

    Returns:
        The scalar loss.
    """
    hardest = neg_scores.max(dim=1).values  # (batch,)
    return torch.clamp(hardest - pos_scores + margin, min=0.0).mean()


class MaxMarginLoss(nn.Module):
    """Rank each query's positive above its hardest sampled negative by a margin δ.

    ``L(θ) = max_{p ∈ Q(q)} ( s(q, p; θ) − s(q, p⁺; θ) + δ(p, p⁺) )`` with ``Q(q) = {p⁺} ∪ Q⁻(q)``,
    ``δ(p, p⁺) = margin`` for ``p ≠ p⁺`` and 0 otherwise, s the cosine of the two encodings.
    Only the hardest negative gets gradient (a sub-gradient of the max).

    Args:
        margin: δ in cosine units (0 < δ ≤ 2). The paper does not give δ's value; 0.2 is our default (not tuned).

    References:
        Lei, Joshi, Barzilay, Jaakkola, Tymoshenko, Moschitti, Màrquez. *Semi-supervised Question
        Retrieval with Gated Convolutions*, NAACL 2016, §3. https://aclanthology.org/N16-1153/

    Inputs:
        +--------------------------------------------+-----------------------------------------+
        | batch                                      | labels                                  |
        +============================================+=========================================+
        | scores (batch, 1 + n_negatives): column 0  | none: column 0 is always the positive   |
        | s(q, p⁺), then 20 random negatives' s      | ("groups" format)                       |
        +--------------------------------------------+-----------------------------------------+

    Relations:
        Same hardest-negative sampling as BOW-CNN's ranking loss, with a hinge instead of the
        logistic ``log(1 + exp(−γ(s⁺ − s⁻)))``. Use
        :class:`~semdup.training.losses.contrastive.ContrastiveLoss` for unranked labelled pairs.

    Example::

        >>> loss = MaxMarginLoss(margin=0.2)
        >>> loss(torch.tensor([[0.9, 0.1, 0.8]]))   # hardest negative 0.8: 0.8 − 0.9 + 0.2
        tensor(0.1000)
    """

    def __init__(self, margin: float = 0.2) -> None:
        super().__init__()
        if not 0.0 < margin <= 2.0:
            raise ValueError(f"margin must lie in (0, 2] (cosine units); got {margin}")
        self.margin = float(margin)

    def forward(self, scores: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """``scores``: (batch, 1 + n_negatives), column 0 the positive ("groups" format); labels unused."""
        if scores.dim() != 2 or scores.shape[1] < 2:
            raise ValueError(f"MaxMarginLoss needs scores (batch, 1 + n_negatives); got shape {tuple(scores.shape)}")
        return compute_max_margin_loss(scores[:, 0], scores[:, 1:], self.margin)

    def get_config_dict(self) -> dict:
        return {"loss": "MaxMarginLoss", "margin": self.margin}

    @property
    def citation(self) -> str:
        return """@inproceedings{lei-etal-2016-semi,
    title = "Semi-supervised Question Retrieval with Gated Convolutions",
    author = "Lei, Tao and Joshi, Hrishikesh and Barzilay, Regina and Jaakkola, Tommi and
              Tymoshenko, Kateryna and Moschitti, Alessandro and M{\\`a}rquez, Llu{\\'i}s",
    booktitle = "Proceedings of NAACL-HLT 2016",
    year = "2016",
    pages = "1279--1289",
    url = "https://aclanthology.org/N16-1153/",
}"""
