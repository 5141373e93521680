"""In-batch softmax ranking loss: every other query's positive and negatives are negatives too.

The loss all-MiniLM-L6-v2 was trained with (sentence-transformers' ``MultipleNegativesRankingLoss``, after
Henderson et al. 2017): for query i, a softmax over its similarity to every candidate of the batch, the target
its own positive. A batch of B groups with k hard negatives each gives every query B(1+k) − 1 negatives
instead of k, which is what keeps a pre-trained sentence encoder from drifting when it is fine-tuned on a few
thousand groups. Dense encoders only: the scores are cosines of the dense vectors.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

__all__ = ["InBatchSoftmaxLoss", "compute_in_batch_softmax_loss"]

logger = logging.getLogger(__name__)


def compute_in_batch_softmax_loss(
    scores: torch.Tensor,
    targets: torch.Tensor,
    scale: float,
    exclude: torch.Tensor | None = None,
    symmetric: bool = False,
) -> torch.Tensor:
    """Mean cross-entropy of ``softmax(scale · scores[i])`` against column ``targets[i]``.

    With ``exclude``, the marked candidates leave query i's softmax (a known duplicate of the query that sits in
    the batch as another group's candidate is not a negative: counting it would push a true duplicate away).
    With ``symmetric``, the loss also runs the other way (Henderson et al. 2017's dual encoder, sentence-
    transformers' ``MultipleNegativesSymmetricRankingLoss``): each positive, softmax over the batch's queries,
    the target its own query; the two directions are averaged.

    Args:
        scores: cosines (batch, n_candidates) of each query with every candidate in the batch.
        targets: (batch,) the column of each query's own positive.
        scale: inverse temperature (20 in sentence-transformers).
        exclude: optional bool (batch, n_candidates), True = leave this candidate out of the query's softmax;
            a query's own target column is never left out.
        symmetric: add the positive → query direction (uses the target columns only).
    """
    logits = scale * scores  # (B, C)
    if exclude is not None:
        if exclude.shape != scores.shape:
            raise ValueError(f"exclude has shape {tuple(exclude.shape)}; expected {tuple(scores.shape)} like scores")
        keep_target = torch.zeros_like(exclude)
        keep_target[torch.arange(len(targets)), targets] = True
        logits = logits.masked_fill(exclude & ~keep_target, float("-inf"))  # (B, C)
    loss = nn.functional.cross_entropy(logits, targets)
    if not symmetric:
        return loss
    back = logits[:, targets].T  # (B, B): row i = positive i against every query of the batch
    own = torch.arange(len(targets), device=scores.device)
    return (loss + nn.functional.cross_entropy(back, own)) / 2


class InBatchSoftmaxLoss(nn.Module):
    """Softmax over all of a batch's candidates, the query's own positive the target.

    Args:
        scale: inverse temperature of the softmax over cosines.
        symmetric: also each positive against the batch's queries (see :func:`compute_in_batch_softmax_loss`).

    References:
        Henderson et al. *Efficient Natural Language Response Suggestion for Smart Reply*, 2017, §4.4;
        Reimers & Gurevych, sentence-transformers ``MultipleNegativesRankingLoss``.

    Inputs:
        scores (batch, batch × (1 + n_negatives)) — every query against every candidate of the batch, the
        candidates of group j at columns j(1+k) .. j(1+k)+k, its positive first; the trainer builds this when
        the loss has ``in_batch = True``. ``exclude`` (optional, same shape, bool): candidates known to be
        duplicates of the query (false negatives), left out of its softmax.

    Example::

        >>> InBatchSoftmaxLoss(scale=1.0)(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([0, 1]))
        tensor(0.3133)
    """

    in_batch = True

    def __init__(self, scale: float = 20.0, symmetric: bool = False) -> None:
        super().__init__()
        if scale <= 0:
            raise ValueError(f"scale must be > 0; got {scale}")
        self.scale = float(scale)
        self.symmetric = bool(symmetric)

    def forward(
        self, scores: torch.Tensor, targets: torch.Tensor, exclude: torch.Tensor | None = None
    ) -> torch.Tensor:
        if scores.dim() != 2 or targets.shape != scores.shape[:1]:
            raise ValueError(f"need scores (batch, candidates) and targets (batch,); got {tuple(scores.shape)}")
        return compute_in_batch_softmax_loss(scores, targets, self.scale, exclude, self.symmetric)

    def get_config_dict(self) -> dict:
        return {"scale": self.scale, "symmetric": self.symmetric}
