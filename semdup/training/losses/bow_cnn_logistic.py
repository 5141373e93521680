"""BOW-CNN's pairwise logistic ranking loss over the hardest of K sampled negatives.

    L = log(1 + exp(−γ · (s(q, c⁺) − max_k s(q, c⁻_k))))

dos Santos et al. 2015 sample K = 20 negatives per positive up front and use, at each step,
the one with the smallest margin; taking the max over the K scores inside the loss is the same
thing, with the gradient flowing through that negative only.
"""

from __future__ import annotations

import logging
from typing import Any

from torch import Tensor, nn

__all__ = ["BowCNNLogisticLoss", "compute_logistic_loss_from_scores"]

logger = logging.getLogger(__name__)


def compute_logistic_loss_from_scores(scores: Tensor, gamma: float) -> Tensor:
    """Mean of log(1 + exp(−γ·(s⁺ − max s⁻))) over the batch.

    Args:
        scores: (B, 1 + K) — column 0 the positive candidate's score, then K negatives.
        gamma: scale γ of the margin (10 in the paper).
    """
    pos = scores[:, 0]  # (B,)
    hardest = scores[:, 1:].max(dim=1).values  # (B,)
    return nn.functional.softplus(-gamma * (pos - hardest)).mean()  # ()


class BowCNNLogisticLoss(nn.Module):
    """Logistic loss on the margin to the hardest negative (dos Santos et al. 2015, §3.4, eq. 5).

    Args:
        gamma: scale factor γ of the margin; 10 in the paper. Larger γ penalises small margins more.

    References:
        C. dos Santos et al., "Learning Hybrid Representations to Retrieve Semantically Equivalent
        Questions", ACL 2015, §3.4. https://aclanthology.org/P15-2114/

    Inputs:
        ============================  ==========================
        scores                        labels
        ============================  ==========================
        (B, 1 + K): positive, then K  none (column 0 is the
        negatives of the same query   positive by construction)
        ============================  ==========================

    Relations:
        Use :class:`MSECosineLoss` for labelled pairs without a ranking structure (Bogdanova's CNN).

    Example::

        >>> loss = BowCNNLogisticLoss(gamma=10.0)
        >>> loss(torch.tensor([[0.9, 0.1, 0.2]]))
    """

    batch_format = "groups"

    def __init__(self, gamma: float = 10.0) -> None:
        super().__init__()
        self.gamma = float(gamma)

    def forward(self, scores: Tensor, labels: Tensor | None = None) -> Tensor:
        return compute_logistic_loss_from_scores(scores, self.gamma)

    def get_config_dict(self) -> dict[str, Any]:
        return {"gamma": self.gamma}

    @property
    def citation(self) -> str:
        return """@inproceedings{dossantos2015learning,
  title={Learning Hybrid Representations to Retrieve Semantically Equivalent Questions},
  author={dos Santos, C{\\'\\i}cero and Barbosa, Luciano and Bogdanova, Dasha and Zadrozny, Bianca},
  booktitle={Proceedings of ACL-IJCNLP (Volume 2: Short Papers)},
  pages={694--699},
  year={2015}
}"""
