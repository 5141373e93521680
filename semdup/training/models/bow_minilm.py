"""bow-minilm: BOW-CNN's fusion with all-MiniLM-L6-v2 as the dense path, fine-tuned end to end.

dos Santos et al. (2015) score a pair as s = β1·cos(tf(q)∘t, tf(c)∘t) + β2·cos(CNN(q), CNN(c)),
with t learned from IDF. Here the CNN is replaced by MiniLM (mean pooling, L2 norm):

    s = β_bow · cos(tf(q)∘t, tf(c)∘t) + β_dense · cos(E_MiniLM(q), E_MiniLM(c))

β_bow, β_dense and t are learned with MiniLM's weights on BOW-CNN's logistic loss (§3.4, eq. 5).

One optimiser, two speeds: MiniLM needs a learning rate near 2e-5 while t and β need about 1e-3.
Adam's step is about ``lr`` in parameter units, so t and β are stored divided by
``fusion_lr_scale`` (50) and multiplied back when used: their effective step is 50 × lr.
``term_weight`` (a property) and ``fusion()`` give the real values, as export and serving expect.

Example::

    semdup train --arch bow-minilm --data semeval --out artifacts/bow-minilm-semeval --epochs 3
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from semdup.core.errors import ConfigError
from semdup.core.text_pipeline import TextPipeline
from semdup.training.losses.bow_cnn_logistic import BowCNNLogisticLoss
from semdup.training.models._base import EncoderModel
from semdup.training.models.minilm import MINILM_DEFAULTS, MiniLM
from semdup.training.registry import ArchSpec, register

__all__ = ["BowMiniLM", "BOW_MINILM_DEFAULTS"]

logger = logging.getLogger(__name__)

BOW_MINILM_DEFAULTS: dict[str, Any] = {
    **MINILM_DEFAULTS,
    "max_len": 128,  # wordpieces; half of MiniLM's 256 keeps CPU fine-tuning to minutes
    "freeze_layers": 4,  # fine-tune the top 2 of 6 layers: CPU-affordable, and keeps the pre-trained features
    "beta_bow_init": 0.5,
    "beta_dense_init": 1.0,
    "learn_term_weights": True,
    "learn_fusion": False,  # learned β collapse towards 0 on SemEval (see class doc); fixed by default
    "fusion_lr_scale": 50.0,
}


class BowMiniLM(MiniLM):
    """BOW-CNN's two-path score with MiniLM as the dense path (dos Santos et al. 2015, §3.3, eq. 3).

    Args (hparams):
        max_len: wordpieces per post for MiniLM (incl. [CLS]/[SEP]).
        freeze_layers: embeddings and this many bottom MiniLM layers stay fixed (default 4 of 6).
        beta_bow_init, beta_dense_init: starting β_bow, β_dense.
        learn_term_weights: learn t (else fixed IDF; Table 5 of the paper prefers learned).
        learn_fusion: learn β_bow, β_dense too. Off by default: on SemEval the hardest of the 4 negatives
            often outscores the positive at the start, and the logistic loss then shrinks both β towards 0
            (every margin → 0, loss → log 2), which we saw in a run (loss 0.55 → 0.69 in one epoch).
        fusion_lr_scale: t and β move this many times faster than MiniLM's weights (see module doc).

    Shapes: ``encode`` gives ``dense`` [B, 384] and the BOW ids/weights [B, L]; ``score`` [B].

    References:
        dos Santos, Barbosa, Bogdanova, Zadrozny. *Learning Hybrid Representations to Retrieve
        Semantically Equivalent Questions*, ACL 2015, §3. https://aclanthology.org/P15-2114/
    """

    uses_bow = True

    def __init__(self, hparams: Mapping[str, Any], pipeline: TextPipeline, pretrained: bool = True) -> None:
        super().__init__(hparams, pipeline, pretrained)
        if pipeline.vocab is None:
            raise ConfigError("bow-minilm needs a text pipeline with a vocabulary (its BOW path's t starts at IDF)")
        h = self.hparams
        self.scale = float(h["fusion_lr_scale"])
        if self.scale <= 0:
            raise ValueError(f"fusion_lr_scale must be > 0; got {self.scale}")
        idf = np.asarray(pipeline.vocab.idf(), dtype=np.float32)
        self.t_scaled = nn.Parameter(torch.from_numpy(idf / self.scale))
        self.t_scaled.requires_grad_(bool(h["learn_term_weights"]))
        self.beta_bow_scaled = nn.Parameter(torch.tensor(float(h["beta_bow_init"]) / self.scale))
        self.beta_dense_scaled = nn.Parameter(torch.tensor(float(h["beta_dense_init"]) / self.scale))
        self.beta_bow_scaled.requires_grad_(bool(h["learn_fusion"]))
        self.beta_dense_scaled.requires_grad_(bool(h["learn_fusion"]))
        self.alpha = 0.0

    @classmethod
    def default_hparams(cls) -> dict[str, Any]:
        return dict(BOW_MINILM_DEFAULTS)

    @property
    def term_weight(self) -> Tensor:
        """t [|V|] in real units."""
        return self.t_scaled * self.scale

    @property
    def beta_bow(self) -> Tensor:
        return self.beta_bow_scaled * self.scale

    @property
    def beta_dense(self) -> Tensor:
        return self.beta_dense_scaled * self.scale

    def fusion(self) -> dict[str, float]:
        return EncoderModel.fusion(self)

    def scale_dense(self, factor: float) -> None:
        # β_dense is derived from the parameter beta_dense_scaled: scale that (scaling the derived tensor is lost).
        with torch.no_grad():
            self.beta_dense_scaled.mul_(factor)


register(
    ArchSpec(
        name="bow-minilm",
        model_class=BowMiniLM,
        input_kind="wordpiece",
        defaults=BOW_MINILM_DEFAULTS,
        loss_class=BowCNNLogisticLoss,
        loss_defaults={"gamma": 10.0},
        batch_format="groups",
        train_defaults={"optimizer": "adam", "lr": 2e-5, "batch_size": 8, "negatives": 4, "epochs": 3, "patience": 2},
        description="BOW-CNN fusion with all-MiniLM-L6-v2 as the dense path (learned t, β), fine-tuned",
    )
)
