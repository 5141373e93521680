"""SCQA's cosine contrastive loss (Das et al. 2016, §4)."""

from __future__ import annotations

import logging

import torch
from torch import nn

__all__ = ["ContrastiveLoss", "compute_contrastive_loss"]

logger = logging.getLogger(__name__)


def compute_contrastive_loss(cos: torch.Tensor, labels: torch.Tensor, margin: float) -> torch.Tensor:
    """Mean of ``1 − cos`` over positive pairs and ``max(0, cos − m)`` over negative pairs.

    Args:
        cos: cosine similarity of each pair, shape (n_pairs,), values in [−1, 1].
        labels: 1 for a positive pair, 0 (or −1) for a negative one, shape (n_pairs,).
        margin: m in [−1, 1): a negative pair costs nothing once its cosine is below m.

    Returns:
        The scalar loss (mean over pairs; the paper sums, which only rescales the learning rate).
    """
    positive = labels > 0  # (n_pairs,)
    per_pair = torch.where(positive, 1.0 - cos, torch.clamp(cos - margin, min=0.0))  # (n_pairs,)
    return per_pair.mean()


class ContrastiveLoss(nn.Module):
    """Pull positive pairs to cosine 1 and push negative pairs below a margin.

    ``loss(q, a) = 1 − cos(q, a)`` if the pair is positive, ``max(0, cos(q, a) − m)`` otherwise,
    averaged over the batch. The two encodings come from the same (siamese) network.

    Args:
        margin: m, the cosine below which a negative pair costs nothing. The paper says only
            that m lies between 0 and 1; 0.3 is our default (not tuned).

    References:
        Das, Yenala, Chinnakotla, Shrivastava. *Together We Stand: Siamese Networks for Similar
        Question Retrieval*, ACL 2016, §4, equation 2. https://aclanthology.org/P16-1036/

    Inputs:
        +-----------------------------------------+----------------------------------------+
        | batch                                   | labels                                 |
        +=========================================+========================================+
        | scores: the siamese model's cosine of   | 1 = question–good answer or duplicate, |
        | each pair, (n_pairs,) ("pairs" format)  | 0 = question–bad/random answer         |
        +-----------------------------------------+----------------------------------------+

    Relations:
        Prefer :class:`~semdup.training.losses.max_margin.MaxMarginLoss` when each query has a
        known positive and a pool of negatives (ranking); this loss suits labelled pairs that do
        not share a query (question–answer pairs).

    Example::

        >>> loss = ContrastiveLoss(margin=0.3)
        >>> loss(torch.tensor([0.9, 0.5]), torch.tensor([1.0, 0.0]))
        tensor(0.1500)
    """

    def __init__(self, margin: float = 0.3) -> None:
        super().__init__()
        if not -1.0 <= margin < 1.0:
            raise ValueError(f"margin must lie in [-1, 1) (a cosine); got {margin}")
        self.margin = float(margin)

    def forward(self, scores: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """``scores``: the model's cosine of each pair (n_pairs,); ``labels``: 1 / 0 per pair (n_pairs,)."""
        if labels is None:
            raise ValueError("ContrastiveLoss needs labels (batch_format 'pairs'): 1 positive, 0 negative")
        return compute_contrastive_loss(scores, labels, self.margin)

    def get_config_dict(self) -> dict:
        return {"loss": "ContrastiveLoss", "margin": self.margin}

    @property
    def citation(self) -> str:
        return """@inproceedings{das-etal-2016-together,
    title = "Together We Stand: Siamese Networks for Similar Question Retrieval",
    author = "Das, Arpita and Yenala, Harish and Chinnakotla, Manoj and Shrivastava, Manish",
    booktitle = "Proceedings of the 54th Annual Meeting of the Association for Computational Linguistics",
    year = "2016",
    pages = "378--387",
    url = "https://aclanthology.org/P16-1036/",
}"""
