"""An exponential moving average (EMA) of a model's weights along one training run.

Why: on a small training set (Travel: 1,570 groups) the dev figure of BOW-CNN moves by 2–4 MAP
points between quarter-epoch checks, and which check wins is partly chance. Averaging the weights
of the last steps smooths that walk; the average is still one set of weights of the same model, so
it is saved as ONE checkpoint and exported like any other (unlike an ensemble of seeds).

The average is bias-corrected (as Adam's moments): the accumulator starts at zero and is divided by
``1 - decay**steps``, so the initial weights never leak in and early checks are a proper average of
the steps seen so far. ``decay`` sets the window: about ``1 / (1 - decay)`` steps (0.99 ≈ 100 steps).

Example::

    ema = WeightAverage(model, decay=0.99)
    ...; opt.step(); ema.update(model)
    with ema.applied(model):        # dev scoring and the best checkpoint see the averaged weights
        dev = evaluate(model)
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from semdup.core.errors import ConfigError

__all__ = ["WeightAverage"]

logger = logging.getLogger(__name__)


class WeightAverage:
    """Bias-corrected EMA of the trainable floating-point tensors of ``model``'s state dict.

    Frozen tensors (e.g. frozen word vectors) are not averaged: they never change.
    """

    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ConfigError(f"the weight-average decay must lie in (0, 1), got {decay}; 0 turns averaging off")
        self.decay = float(decay)
        self.steps = 0
        trainable = {n for n, p in model.named_parameters() if p.requires_grad}
        self._acc = {
            k: torch.zeros_like(v) for k, v in model.state_dict().items() if k in trainable and v.is_floating_point()
        }
        if not self._acc:
            raise ConfigError(f"{type(model).__name__} has no trainable weights to average")

    def update(self, model: nn.Module) -> None:
        """Fold the model's current weights in (call after every optimiser step)."""
        self.steps += 1
        state = model.state_dict()
        with torch.no_grad():
            for k, acc in self._acc.items():
                acc.mul_(self.decay).add_(state[k].detach(), alpha=1.0 - self.decay)

    def averaged_state(self) -> dict[str, torch.Tensor]:
        """The bias-corrected averages (copies), keyed as the model's state dict."""
        if self.steps == 0:
            raise RuntimeError("no step has been averaged yet; call update() after each optimiser step")
        correction = 1.0 - self.decay**self.steps
        return {k: acc / correction for k, acc in self._acc.items()}

    def state(self) -> dict[str, object]:
        """The accumulator and step count (a resumable run saves them beside the optimiser's state)."""
        return {"steps": self.steps, "decay": self.decay, "acc": {k: v.clone() for k, v in self._acc.items()}}

    def load_state(self, state: dict[str, object]) -> None:
        """Restore :meth:`state`; refuses one of another decay or other tensors."""
        acc = state["acc"]
        if float(state["decay"]) != self.decay or not isinstance(acc, dict) or set(acc) != set(self._acc):
            raise ConfigError("the saved weight average does not match this model and decay; start a new run")
        self.steps = int(state["steps"])  # type: ignore[call-overload]
        for k, v in acc.items():
            self._acc[k].copy_(v)

    @contextmanager
    def applied(self, model: nn.Module) -> Iterator[None]:
        """Inside the block the model holds the averaged weights; its own weights come back after."""
        state = model.state_dict()
        raw = {k: state[k].detach().clone() for k in self._acc}
        model.load_state_dict(self.averaged_state(), strict=False)
        try:
            yield
        finally:
            model.load_state_dict(raw, strict=False)
