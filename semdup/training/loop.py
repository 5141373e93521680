"""The one training loop: the papers' models (``trainer.train``), ``semdup learn``'s fine-tune
(``learn.trainer.learn_encoder``) and the RCNN pre-training (``experiments.rcnn_pretraining``) all run on it.

A run is a model, a loss (any ``batch -> scalar``; a loss module's own parameters, such as the pre-training's title
decoder, train beside the model's, as in sentence-transformers) and an optimiser, over the caller's schedule of
batches (epochs × batches, or a fixed number of steps). :class:`Loop` adds the rest: learning rate per step, bf16
autocast on CUDA, clipping, the weight average (:class:`WeightAverage`), progress, evaluation hooks with early
stopping (:class:`KeepBest`), a deadline, and an atomic resumable state.

Example::

    loop = Loop(model, loss, torch.optim.Adam(Loop.trainable(model, loss)), max_grad_norm=5.0, ema_decay=0.99)
    stopped = loop.run(batches, after_step=lambda batch, loss: False)   # "done", "budget" or "stopped"
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from semdup.core.errors import ConfigError
from semdup.core.progress import progress

__all__ = ["DEVICES", "REPORT_EVERY_S", "KeepBest", "Loop", "WeightAverage", "resolve_device"]

logger = logging.getLogger(__name__)

DEVICES = ("auto", "cpu", "cuda")
REPORT_EVERY_S = 30.0  # how often ``report`` hears where the run is (on a terminal the bar moves at every step too)


def resolve_device(device: str) -> str:
    """``cpu`` or ``cuda`` for ``device`` (one of :data:`DEVICES`; ``auto``: CUDA when torch sees a GPU).

    Raises:
        ConfigError: ``cuda`` without a CUDA device torch can use (refused before anything is loaded, in one line
            that says what torch found), or an unknown name.
    """
    if device not in DEVICES:
        raise ConfigError(f"unknown device {device!r}; accepted: {', '.join(DEVICES)}")
    has_cuda = torch.cuda.is_available()
    if device == "cuda" and not has_cuda:
        built = torch.version.cuda or "none (a CPU-only build)"
        raise ConfigError(f"--device cuda: torch {torch.__version__} sees no CUDA device (its CUDA: {built}); "
                          "use --device cpu, or auto to take a GPU only where there is one")
    return "cuda" if device == "cuda" or (device == "auto" and has_cuda) else "cpu"


class WeightAverage:
    """Bias-corrected exponential moving average of the trainable floating-point weights of ``model``.

    Why: on a small training set (Travel: 1,570 groups) BOW-CNN's dev figure moves by 2–4 MAP points between
    quarter-epoch checks, and which check wins is partly chance; averaging the last steps' weights smooths that
    walk, and the average is still one set of weights of the same model (one checkpoint, unlike an ensemble).
    The accumulator starts at zero and is divided by ``1 - decay**steps`` (as Adam's moments), so the initial
    weights never leak in; ``decay`` sets the window, about ``1 / (1 - decay)`` steps. Frozen tensors are not
    averaged: they never change.
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

    @contextlib.contextmanager
    def applied(self, model: nn.Module) -> Iterator[None]:
        """Inside the block the model holds the averaged weights; its own weights come back after."""
        state = model.state_dict()
        raw = {k: state[k].detach().clone() for k in self._acc}
        model.load_state_dict(self.averaged_state(), strict=False)
        try:
            yield
        finally:
            model.load_state_dict(raw, strict=False)


class KeepBest:
    """Early stopping's record: the best evaluation so far (higher is better), a copy of the weights that gave it,
    and how many evaluations have not beaten it since."""

    def __init__(self) -> None:
        self.value, self.state, self.since = -float("inf"), None, 0

    def update(self, value: float, model: nn.Module) -> bool:
        """Record an evaluation of ``model``'s current weights (inside :meth:`Loop.evaluating`, so an averaged run
        keeps its averaged weights); True when it is the best so far."""
        if value > self.value:
            self.value, self.state, self.since = float(value), copy.deepcopy(model.state_dict()), 0
            return True
        self.since += 1
        return False


class Loop:
    """One training run's steps, state and evaluations (see the module doc).

    Args:
        model: what the run produces (its weights are averaged, saved in the state and evaluated).
        loss: ``batch -> scalar``; an ``nn.Module``'s own parameters train too.
        optimizer: over :meth:`trainable`; ``max_grad_norm`` clips them (0 = off).
        ema_decay: 0 = off; else the :class:`WeightAverage` of ``model`` (the evaluations see it).
        device, mixed_precision: on CUDA with ``mixed_precision`` the loss runs under bf16 autocast (weights,
            optimiser and loss stay float32); CPU stays float32 (bf16 was measured slower there: 19 vs 10 s a learn
            step on 2 cores).
        lr_at: 0-based step -> learning rate of every parameter group (None = the optimiser's own).
        desc, show_progress: the progress bar (shown on a terminal only).
        report: hears a line (steps, minutes, about how many left) every :data:`REPORT_EVERY_S` s and at
            :meth:`tell`.
    """

    def __init__(self, model: nn.Module, loss: Callable[[Any], torch.Tensor], optimizer: torch.optim.Optimizer, *,
                 max_grad_norm: float = 0.0, ema_decay: float = 0.0, device: str = "cpu",
                 mixed_precision: bool = False, lr_at: Callable[[int], float] | None = None, desc: str = "train",
                 show_progress: bool = True, report: Callable[[str], None] | None = None) -> None:
        self.model, self.loss, self.optimizer, self.params = model, loss, optimizer, self.trainable(model, loss)
        self.max_grad_norm, self.lr_at = max_grad_norm, lr_at
        self.bf16 = mixed_precision and device == "cuda"
        self.ema = WeightAverage(model, ema_decay) if ema_decay > 0 else None
        self.desc, self.show_progress, self.report = desc, show_progress, report
        self.started, self.spent_before, self.step, self.eval_seconds = time.monotonic(), 0.0, 0, 0.0
        self.losses: list[float] = []
        self.step_times: list[float] = []

    @staticmethod
    def trainable(model: nn.Module, loss: object = None) -> list[nn.Parameter]:
        """The trainable parameters of ``model``, then those of ``loss`` (when a module) it does not share."""
        own = list(loss.parameters()) if isinstance(loss, nn.Module) else []
        return [p for p in dict.fromkeys([*model.parameters(), *own]) if p.requires_grad]

    def seconds(self) -> float:
        """Wall-clock seconds of the run so far, earlier sessions of a resumed run included."""
        return self.spent_before + time.monotonic() - self.started

    @contextlib.contextmanager
    def evaluating(self, averaged: bool = True) -> Iterator[None]:
        """Eval mode without gradients (the weight average applied when ``averaged`` and there is one), timed in
        ``eval_seconds`` (what the deadline keeps free for a check); train mode again after."""
        t0 = time.monotonic()
        self.model.eval()
        apply = averaged and self.ema is not None and self.ema.steps
        try:
            with torch.no_grad(), (self.ema.applied(self.model) if apply else contextlib.nullcontext()):
                yield
        finally:
            self.model.train()
            self.eval_seconds = time.monotonic() - t0

    def tell(self, total: int | None, why: str = "") -> None:
        """A ``report`` line: steps done, minutes spent, about how many are left."""
        times, left = self.step_times, ""
        if times and total is not None and self.step < total:
            left = f", about {(total - self.step) * sum(times) / len(times) / 60:.1f} min left"
        if self.report is not None:
            self.report(f"step {self.step}/{total}, {self.seconds() / 60:.1f} min{left}{why}")

    def run(self, batches: Iterable[Any], *, total: int | None = None,
            after_step: Callable[[Any, float], bool] | None = None,
            penalty: Callable[[], torch.Tensor] | None = None, deadline: float = float("inf"),
            reserve_s: float = 0.0, state_path: Path | None = None, save_every_s: float = float("inf"),
            extra_state: Callable[[], Mapping[str, Any]] | None = None) -> str:
        """Train on ``batches`` (consumed lazily: a generator may draw an epoch's order when it gets there) from
        step ``self.step`` on, ``total`` planned (progress only).

        Returns ``"done"`` when they run out, ``"stopped"`` when ``after_step(batch, loss)`` (called after every
        step) returned True, ``"budget"`` when the next step would end after ``deadline`` (``time.monotonic()``;
        the median step, one check and ``reserve_s`` kept free; the first step always runs). ``penalty()`` is
        added to the loss before the backward pass and left out of the reported loss. With ``state_path``,
        :meth:`save` writes there (with ``extra_state()``) every ``save_every_s`` seconds, not after the last step.
        """
        bar = progress(total=total, initial=self.step, desc=self.desc, unit="step", enabled=self.show_progress)
        last_save = last_report = time.monotonic()
        stopped = "done"
        if isinstance(self.loss, nn.Module):
            self.loss.train()
        self.model.train()
        for batch in batches:
            if self.step_times:
                typical = sorted(self.step_times)[len(self.step_times) // 2]
                if time.monotonic() + typical + self.eval_seconds + reserve_s > deadline:
                    stopped = "budget"
                    break
            t0 = time.monotonic()
            if self.lr_at is not None:
                for g in self.optimizer.param_groups:
                    g["lr"] = self.lr_at(self.step)
            self.optimizer.zero_grad()
            with torch.autocast("cuda", dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext():
                loss = self.loss(batch)
            (loss if penalty is None else loss + penalty()).backward()
            if self.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
            self.optimizer.step()
            if self.ema is not None:
                self.ema.update(self.model)
            self.step += 1
            self.step_times.append(time.monotonic() - t0)
            self.losses.append(float(loss.detach()))
            bar.update(1)
            bar.set_postfix(loss=f"{np.mean(self.losses[-20:]):.4f}")
            if time.monotonic() - last_report >= REPORT_EVERY_S and self.step != total:
                self.tell(total)
                last_report = time.monotonic()
            if after_step is not None and after_step(batch, self.losses[-1]):
                stopped = "stopped"
                break
            if state_path is not None and time.monotonic() - last_save > save_every_s and self.step != total:
                self.save(state_path, extra_state)
                last_save = time.monotonic()
        bar.close()
        return stopped

    def save(self, path: Path, extra: Callable[[], Mapping[str, Any]] | None = None) -> None:
        """Write the resumable state to ``path`` atomically: ``extra()``, the step, the seconds spent, the torch
        random state, the model's trainable weights, the optimiser and the weight average."""
        trainable = {n for n, p in self.model.named_parameters() if p.requires_grad}
        payload = {**dict(extra() if extra is not None else {}), "step": self.step, "seconds": self.seconds(),
                   "eval_seconds": self.eval_seconds, "torch_rng": torch.get_rng_state(),
                   "model": {k: v.to("cpu") for k, v in self.model.state_dict().items() if k in trainable},
                   "optimizer": self.optimizer.state_dict(), "ema": self.ema.state() if self.ema else None}
        tmp = path.with_suffix(".tmp")
        torch.save(payload, tmp)
        tmp.replace(path)

    def load(self, state: Mapping[str, Any]) -> None:
        """Resume from the state :meth:`save` wrote (``torch.load`` it; the caller checks its own entries first)."""
        self.model.load_state_dict(state["model"], strict=False)
        self.optimizer.load_state_dict(state["optimizer"])
        if self.ema is not None:
            self.ema.load_state(state["ema"])
        self.step, self.spent_before, self.eval_seconds = state["step"], state["seconds"], state["eval_seconds"]
        torch.set_rng_state(state["torch_rng"])
