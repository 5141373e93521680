"""What a learn run trains with (:class:`LearnSettings`) and what it reports at the end (:class:`LearnSummary`).

The settings are the recipe: everything that changes the trained weights (saved in the checkpoint and compared on
resume). How long the run may take and how often it saves are arguments of
:func:`~semdup.training.learn.trainer.learn_encoder`, not settings: a run resumed with a larger budget is the same
recipe.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from semdup.core.errors import ConfigError

__all__ = ["LearnSettings", "LearnSummary"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LearnSettings:
    """The fine-tuning recipe of a mean-pooled sentence encoder on a site's duplicate links.

    Args:
        base_encoder: the pre-trained encoder (a name of :mod:`semdup.training.base_encoders`: minilm, mpnet).
        max_len: wordpieces per post, special tokens included (0 = the encoder's own).
        train_len: wordpieces per post in the training steps only (0 = ``max_len``): the trainable layers see each
            post's first ``train_len`` positions of the frozen bottom's states, which were computed over the whole
            post. The cost of a step falls about in proportion on long posts; every score (the curve, the folds,
            the exported model) reads the whole post. 96 (issue #44): out of fold on SemEval 84.15 where the whole
            post gave 84.09, and a step on the 2,546-link site dump 1.63x cheaper (docs/results.md).
        freeze_layers: the embeddings and this many bottom transformer layers stay fixed; their output is computed
            once per post (:mod:`~semdup.training.learn.frozen`), so only the layers above cost anything per step.
            4 of MiniLM's 6 (issue #33): out of fold on SemEval the same MAP as 2 (84.43 vs 84.39) at about half the
            training CPU; 5 lost 1.4.
        lr: Adam's learning rate.
        warmup_share: share of the planned steps over which the rate rises linearly from 0 (0 = constant rate).
        decay: ``"constant"`` or ``"linear"`` (to 0 at the last planned step, after the warm-up).
        batch_size: groups per step (each query's softmax runs over every candidate of the batch).
        hard_negatives: labelled non-duplicates per group beside the positive (0 = in-batch negatives only).
        epochs: passes over the groups without a budget (a fraction is allowed: 1.5 = one and a half). ``semdup
            learn`` scores its fold models after every pass and the final model trains the passes that were best
            out of fold (:mod:`semdup.learn.pass_curve`), so this is the most a run without a budget tries.
        max_epochs: the most passes a run with a budget plans: as many as its minutes fit, up to this (the
            passes-to-figure curve then says how many the final model trains).
        symmetric: the loss also ranks the batch's queries for each positive.
        mask_known: leave a query's known duplicates out of its softmax (see :mod:`~semdup.training.learn.data`).
        scale: the softmax's inverse temperature over cosines.
        ema_decay: 0 = off, else the saved weights are a moving average over about 1 / (1 − decay) steps.
        max_grad_norm: gradient clipping (0 = off).
        seed: order, dropout and sampling seed.
        chunk_size: posts per forward pass; a step's posts are sorted by length and cut into chunks, so little
            padding is computed (the same loss and gradients as one padded batch).
    """

    base_encoder: str = "minilm"
    max_len: int = 256
    train_len: int = 96
    freeze_layers: int = 4
    lr: float = 2e-5
    warmup_share: float = 0.0
    decay: str = "constant"
    batch_size: int = 32
    hard_negatives: int = 1
    epochs: float = 2.0
    symmetric: bool = False
    mask_known: bool = True
    scale: float = 20.0
    ema_decay: float = 0.0
    max_grad_norm: float = 5.0
    seed: int = 0
    chunk_size: int = 16
    max_epochs: float = 4.0

    def __post_init__(self) -> None:
        problems = []
        if self.lr <= 0 or self.batch_size < 2 or self.epochs <= 0 or self.chunk_size < 1 or self.max_epochs <= 0:
            problems.append(f"need lr > 0, batch_size >= 2, epochs > 0, chunk_size >= 1, max_epochs > 0; got "
                            f"{self.lr}, {self.batch_size}, {self.epochs}, {self.chunk_size}, {self.max_epochs}")
        if self.train_len < 0 or self.train_len == 1:
            problems.append(f"train_len must be 0 (the whole post) or at least 2; got {self.train_len}")
        if not 0.0 <= self.warmup_share < 1.0 or self.decay not in ("constant", "linear"):
            problems.append(f"warmup_share must lie in [0, 1) and decay be constant or linear; got "
                            f"{self.warmup_share}, {self.decay!r}")
        if not 0.0 <= self.ema_decay < 1.0 or self.hard_negatives < 0 or self.scale <= 0:
            problems.append(f"need 0 <= ema_decay < 1, hard_negatives >= 0, scale > 0; got {self.ema_decay}, "
                            f"{self.hard_negatives}, {self.scale}")
        if problems:
            raise ConfigError("; ".join(problems))

    def steps_per_epoch(self, n_groups: int) -> int:
        return max(1, math.ceil(n_groups / self.batch_size))

    def planned_steps(self, n_groups: int) -> int:
        """Steps of the whole recipe on ``n_groups`` groups (before any budget cut)."""
        return max(1, math.ceil(self.epochs * self.steps_per_epoch(n_groups)))

    def lr_factor(self, step: int, planned: int) -> float:
        """The rate's multiplier at 0-based ``step`` of ``planned`` (warm-up, then constant or linear decay)."""
        warm = int(self.warmup_share * planned)
        if warm and step < warm:
            return (step + 1) / warm
        if self.decay == "linear":
            return max(0.0, (planned - step) / max(1, planned - warm))
        return 1.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> LearnSettings:
        known = set(cls.__dataclass_fields__)
        unknown = set(obj) - known
        if unknown:
            raise ConfigError(f"unknown learn settings {sorted(unknown)}; known: {sorted(known)}")
        return cls(**obj)


@dataclass
class LearnSummary:
    """What a run did: steps, time, why it stopped, and the held-out figure before and after.

    ``stopped`` is ``"done"`` (every planned step) or ``"budget"`` (the time budget ran out first). ``seconds``
    counts every session of a resumed run.
    """

    steps: int
    planned_steps: int
    epochs: float
    seconds: float
    stopped: str
    dev_metric: str | None = None
    dev_before: float | None = None
    dev_after: float | None = None
    resumed_from_step: int = 0
    curve: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def record(self) -> dict[str, Any]:
        """What a bundle's manifest keeps: the same run gives the same record (no timings, no curve)."""
        return {k: v for k, v in asdict(self).items() if k not in ("seconds", "curve", "resumed_from_step")}

    def line(self) -> str:
        """One line for the log and the CLI."""
        dev = ""
        if self.dev_metric is not None and self.dev_before is not None and self.dev_after is not None:
            dev = f"; held-out {self.dev_metric} {self.dev_before:.2f} -> {self.dev_after:.2f}"
        resumed = f" (resumed at step {self.resumed_from_step})" if self.resumed_from_step else ""
        return (f"{self.steps}/{self.planned_steps} steps ({self.epochs:.2f} epochs) in {self.seconds / 60:.1f} min, "
                f"stopped: {self.stopped}{resumed}{dev}")
