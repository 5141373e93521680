"""Mean squared error between a pair's cosine similarity and its 1/0 duplicate label.

    L = mean_i (cos(r(q_i), r(c_i)) − y_i)²,   y_i ∈ {0, 1}

Bogdanova et al. 2015 train their siamese CNN this way and call a pair a duplicate when the
cosine exceeds a threshold tuned on held-out data.
"""

from __future__ import annotations

import logging
from typing import Any

from torch import Tensor, nn

__all__ = ["MSECosineLoss", "compute_mse_loss_from_scores"]

logger = logging.getLogger(__name__)


def compute_mse_loss_from_scores(scores: Tensor, labels: Tensor) -> Tensor:
    """Mean of (s − y)².

    Args:
        scores: (B,) pair similarities (cosines in [−1, 1]).
        labels: (B,) 1.0 for duplicates, 0.0 otherwise.
    """
    return ((scores - labels.to(scores.dtype)) ** 2).mean()  # ()


class MSECosineLoss(nn.Module):
    """MSE of cosine similarity against 1/0 labels (Bogdanova et al. 2015, §3).

    Args:
        none.

    References:
        D. Bogdanova, C. dos Santos, L. Barbosa, B. Zadrozny, "Detecting Semantically Equivalent
        Questions in Online User Forums", CoNLL 2015, §3. https://aclanthology.org/K15-1013/

    Inputs:
        ==============================  =========================
        scores                          labels
        ==============================  =========================
        (B,) cosine of (q_i, c_i)       (B,) 1.0 duplicate / 0.0
        ==============================  =========================

    Relations:
        For ranking a candidate list prefer :class:`BowCNNLogisticLoss`, which trains the ordering
        directly; this loss fits absolute scores so one threshold separates duplicates.

    Example::

        >>> MSECosineLoss()(torch.tensor([0.8, 0.1]), torch.tensor([1.0, 0.0]))
    """

    batch_format = "pairs"

    def forward(self, scores: Tensor, labels: Tensor | None = None) -> Tensor:
        if labels is None:
            raise ValueError("MSECosineLoss needs labels (1.0 duplicate / 0.0 not) for every pair")
        return compute_mse_loss_from_scores(scores, labels)

    def get_config_dict(self) -> dict[str, Any]:
        return {}

    @property
    def citation(self) -> str:
        return """@inproceedings{bogdanova2015detecting,
  title={Detecting Semantically Equivalent Questions in Online User Forums},
  author={Bogdanova, Dasha and dos Santos, C{\\'\\i}cero and Barbosa, Luciano and Zadrozny, Bianca},
  booktitle={Proceedings of CoNLL},
  pages={123--131},
  year={2015}
}"""
