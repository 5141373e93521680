"""Fine-tune a sentence encoder on a site's duplicate groups inside a time budget; resumable, with a summary.

:func:`learn_encoder` runs the recipe (:class:`~semdup.training.learn.settings.LearnSettings`) step by step:
a seeded order of the groups per epoch, the in-batch softmax loss of each batch
(:func:`~semdup.training.learn.step.step_loss`) over the frozen bottom computed once per post
(:mod:`~semdup.training.learn.frozen`), Adam, on CPU or CUDA, on the one training loop (:mod:`semdup.training.loop`).
Every ``save_every_minutes`` the loop's state goes to ``learn-state.pt``; run again on the same folder with the same
recipe and data, it resumes from that step to the weights an uninterrupted run would give (with one torch thread).
A different recipe or data in the folder is refused.

A run is finished when every planned step is done: the result is then a standard checkpoint
(``semdup.training.checkpoint``), so ``semdup export`` takes it as any other. With a ``deadline``, a run whose
next step would not fit stops there, saves its state and returns unfinished (``LearnRun.finished`` False, no
checkpoint): the recipe is never cut short silently, and the same call later goes on from that step. ``report``
hears where the run is every half minute (steps, minutes, about how many are left), terminal or not.

No early stopping: the recipe's length was chosen on dev beforehand, and the held-out figure is measured only
before and after (plus ``eval_points`` checks for a learning curve, which choose nothing), so the gate that later
compares it with the current bundle is not biased by a choice made on the same queries.

Example::

    data = learn_data_from_dump(dump, "train", hard_negatives=1)
    run = learn_encoder(LearnSettings(), data, "artifacts/learn/travel", device="cuda",
                        evaluate=lambda scorer: eval_travel(scorer, dump, "dev"), metric="MAP")
    run.summary.line()   # "<steps>/<planned> steps (<epochs> epochs) in <min> min, stopped: done; ..."
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from semdup.core.errors import ConfigError
from semdup.core.posts import Post
from semdup.core.text_pipeline import check_post
from semdup.training.checkpoint import CheckpointScorer, save_checkpoint, write_metrics
from semdup.training.learn.data import LearnData
from semdup.training.learn.frozen import FrozenPrefix, PostVectors, build_model
from semdup.training.learn.settings import LearnSettings, LearnSummary
from semdup.training.learn.step import step_loss
from semdup.training.loop import Loop
from semdup.training.losses.in_batch import InBatchSoftmaxLoss
from semdup.training.models.minilm import MiniLM

__all__ = ["LearnRun", "learn_encoder", "pass_points", "pass_dir", "step_seconds", "PassHook", "Report", "STATE_FILE",
           "SUMMARY_FILE"]

logger = logging.getLogger(__name__)

STATE_FILE = "learn-state.pt"
SUMMARY_FILE = "learn-summary.json"
Evaluate = Callable[[CheckpointScorer], Mapping[str, float]]
Report = Callable[[str], None]
PassHook = Callable[[MiniLM, float], Mapping[str, Any]]
PASSES_DIR = "passes"


def pass_points(settings: LearnSettings, n_groups: int) -> dict[int, float]:
    """step -> passes done, at the end of every whole pass and at the last planned step, named by the recipe's
    ``epochs`` there (a fractional last pass: every model of the recipe names its points alike, whatever its side's
    size rounds its steps to)."""
    per_epoch, planned = settings.steps_per_epoch(n_groups), settings.planned_steps(n_groups)
    points = {e * per_epoch: float(e) for e in range(1, int(settings.epochs) + 1) if e * per_epoch < planned}
    points[planned] = float(settings.epochs)
    return points


def pass_dir(out_dir: str | Path, passes: float) -> Path:
    """The checkpoint a run with ``on_pass`` wrote after ``passes`` passes (a standard checkpoint folder)."""
    return Path(out_dir) / PASSES_DIR / f"{passes:g}"


@dataclass(frozen=True)
class LearnRun:
    """The checkpoint folder, the run's summary, whether this call found it finished (``reused``), and whether it
    is finished (False: the budget stopped it; its state is saved and the same call resumes it)."""

    checkpoint_dir: Path
    summary: LearnSummary
    reused: bool = False
    finished: bool = True


def _order(n_groups: int, seed: int, epoch: int) -> list[int]:
    order = list(range(n_groups))
    random.Random(f"learn-order:{seed}:{epoch}").shuffle(order)
    return order


def _batch_at(data: LearnData, settings: LearnSettings, step: int) -> list[Any]:
    """The groups of 0-based ``step``: epoch e's seeded order cut into batches (the last one may be short)."""
    per_epoch = settings.steps_per_epoch(len(data.groups))
    epoch, at = divmod(step, per_epoch)
    order = _order(len(data.groups), settings.seed, epoch)
    idx = order[at * settings.batch_size : (at + 1) * settings.batch_size]
    if len(idx) < 2:  # a last batch of one group has no in-batch negative: borrow from the epoch's start
        idx = idx + order[: 2 - len(idx)]
    return [data.groups[i] for i in idx]


class _SortedScorer(CheckpointScorer):
    """The checkpoint scorer of the model being trained, encoding in length-sorted chunks over the cached frozen
    bottom (the held-out checks cost a fraction of padded batches on short posts; the vectors are the same)."""

    def __init__(self, model: MiniLM, prefix: FrozenPrefix | None) -> None:
        super().__init__(model, model.pipeline)
        self._vectors = PostVectors(model, prefix, chunk_size=64)

    def encode(self, posts: Sequence[Post]) -> tuple[np.ndarray | None, Any]:
        for p in posts:
            check_post(p)
        with torch.no_grad():
            dense = self._vectors(posts)
        return dense.cpu().numpy(), None


def _evaluate(loop: Loop, prefix: FrozenPrefix | None, evaluate: Evaluate | None, metric: str | None,
              averaged: bool = True) -> float | None:
    if evaluate is None or metric is None:
        return None
    with loop.evaluating(averaged):
        figures = dict(evaluate(_SortedScorer(loop.model, prefix)))  # type: ignore[arg-type]
    if metric not in figures:
        raise ConfigError(f"the held-out evaluation gave {sorted(figures)}, not {metric!r}")
    return float(figures[metric])


def learn_encoder(
    settings: LearnSettings,
    data: LearnData,
    out_dir: str | Path,
    deadline: float | None = None,
    evaluate: Evaluate | None = None,
    metric: str | None = None,
    eval_points: int = 0,
    save_every_minutes: float = 5.0,
    threads: int = 2,
    reserve_minutes: float = 0.0,
    extra_config: Mapping[str, Any] | None = None,
    show_progress: bool = True,
    device: str = "cpu",
    prefix: FrozenPrefix | None = None,
    report: Report | None = None,
    on_pass: PassHook | None = None,
) -> LearnRun:
    """Fine-tune ``settings.base_encoder`` on ``data`` into the checkpoint folder ``out_dir`` (see the module doc).

    Args:
        settings: the recipe.
        data: groups and known duplicates (:mod:`~semdup.training.learn.data`).
        out_dir: the checkpoint folder; a run's state there is resumed when its recipe and data match.
        deadline: ``time.monotonic()`` by which this call stops training (the held-out checks included); None =
            no limit. A run it stops is saved and returned unfinished (see the module doc).
        evaluate: scorer -> held-out figures (run before and after; None = no held-out check).
        metric: the figure of ``evaluate`` to report.
        eval_points: extra held-out checks spread over the run (a learning curve; nothing is chosen by them).
        save_every_minutes: how often the resumable state is written.
        threads: torch CPU threads.
        reserve_minutes: minutes kept free at the end besides the final check (the caller's export and fit).
        extra_config: more entries for the checkpoint's config.json.
        show_progress: a progress bar on a terminal.
        device: ``cpu`` or ``cuda`` (:func:`semdup.training.loop.resolve_device`).
        prefix: the frozen bottom's cache to share with other runs of the same base (:mod:`.frozen`); None = a new
            one for this run (none when nothing is frozen).
        report: called with a progress line (steps done, minutes spent, about how many left) every
            :data:`semdup.training.loop.REPORT_EVERY_S` seconds and when the run stops, on a terminal or not.
        on_pass: called (eval mode, no gradients) with the model and the passes done at the end of every pass and at
            the last step (:func:`pass_points`); what it returns joins the curve, and the model of that pass is
            saved as a checkpoint (:func:`pass_dir`). With the default constant rate, the model after p passes of
            this run is the model a p-pass run would train: ``semdup learn`` picks the passes on that curve.

    Raises:
        ConfigError: ``out_dir`` holds the state of another recipe or other data.
    """
    t_start = time.monotonic()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(threads)
    fingerprint = {"settings": settings.to_json(), "data": data.fingerprint()}
    summary_path = out / SUMMARY_FILE
    if summary_path.exists():
        done = json.loads(summary_path.read_text(encoding="utf-8"))
        if done.get("fingerprint") != fingerprint:
            raise ConfigError(f"{out} holds a finished learn run of another recipe or other data; "
                              "give a new folder or remove it")
        summary = LearnSummary(**done["summary"])
        logger.info("%s already holds this finished run: %s", out, summary.line())
        return LearnRun(out, summary, reused=True)
    random.seed(settings.seed)
    torch.manual_seed(settings.seed)
    model = build_model(settings).to(device)
    if prefix is None and settings.freeze_layers > 0:
        prefix = FrozenPrefix(model, device)
    vectors = PostVectors(model, prefix, settings.chunk_size, settings.train_len)
    loss_fn = InBatchSoftmaxLoss(scale=settings.scale, symmetric=settings.symmetric)
    planned = settings.planned_steps(len(data.groups))
    loop = Loop(model, lambda batch: step_loss(vectors, batch, data.known, loss_fn, settings.mask_known),
                torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=settings.lr),
                max_grad_norm=settings.max_grad_norm, ema_decay=settings.ema_decay, device=device,
                mixed_precision=True, lr_at=lambda step: settings.lr * settings.lr_factor(step, planned), desc="learn",
                show_progress=show_progress, report=report)
    loop.started = t_start
    curve: list[dict[str, Any]] = []
    dev_before = None
    state_path = out / STATE_FILE
    if state_path.exists():
        state = torch.load(state_path, map_location="cpu", weights_only=False)
        if state["fingerprint"] != fingerprint:
            raise ConfigError(f"{out / STATE_FILE} belongs to another recipe or other data "
                              f"({state['fingerprint']} vs {fingerprint}); give a new folder or remove the file")
        loop.load(state)
        curve, dev_before = state["curve"], state["dev_before"]
        logger.info("resuming %s at step %d of %d (%.1f min spent before)", out, loop.step, planned,
                    loop.spent_before / 60)
    resumed_from = loop.step
    if loop.step == 0 and dev_before is None:
        dev_before = _evaluate(loop, prefix, evaluate, metric)
        if dev_before is not None:
            logger.info("held-out %s before training: %.2f (%.0f s)", metric, dev_before, loop.eval_seconds)
    checks = {round(planned * (j + 1) / (eval_points + 1)) for j in range(eval_points)} if eval_points else set()
    passes_at = pass_points(settings, len(data.groups)) if on_pass is not None else {}

    def config() -> dict[str, Any]:
        return {"threshold": None, "seed": settings.seed, "data": data.summary,
                "learn": {"settings": settings.to_json()}, **dict(extra_config or {})}

    def after_step(_batch: Any, loss: float) -> bool:
        if loop.step in passes_at and on_pass is not None:
            passes = passes_at[loop.step]
            with loop.evaluating(True):
                entry = dict(on_pass(model, passes))
                save_checkpoint(pass_dir(out, passes), model, "minilm", model.pipeline, config())
            curve.append({"step": loop.step, "epoch": passes, "loss": loss, **entry})
            logger.info("after %g passes (step %d/%d): %s", passes, loop.step, planned, entry)
        if loop.step in checks:
            value = _evaluate(loop, prefix, evaluate, metric)
            epoch = round(loop.step / settings.steps_per_epoch(len(data.groups)), 3)
            curve.append({"step": loop.step, "epoch": epoch, "loss": loss, metric or "dev": value})
            logger.info("step %d/%d: loss %.4f held-out %s %s", loop.step, planned, loss, metric, value)
        return False

    def mine() -> dict[str, Any]:
        return {"fingerprint": fingerprint, "curve": curve, "dev_before": dev_before}

    stopped = loop.run((_batch_at(data, settings, s) for s in range(loop.step, planned)), total=planned,
                       after_step=after_step, deadline=float("inf") if deadline is None else deadline,
                       reserve_s=reserve_minutes * 60.0, state_path=state_path,
                       save_every_s=save_every_minutes * 60.0, extra_state=mine)
    loop.tell(planned, " (stopped by the budget; saved)" if stopped == "budget" else " (done)")
    if stopped != "budget" and loop.ema is not None and loop.ema.steps:
        model.load_state_dict(loop.ema.averaged_state(), strict=False)
    dev_after = None if stopped == "budget" else _evaluate(loop, prefix, evaluate, metric, averaged=False)
    summary = LearnSummary(steps=loop.step, planned_steps=planned,
                           epochs=round(loop.step / settings.steps_per_epoch(len(data.groups)), 3),
                           seconds=round(loop.seconds(), 1), stopped=stopped, dev_metric=metric,
                           dev_before=dev_before, dev_after=dev_after, resumed_from_step=resumed_from, curve=curve)
    if stopped == "budget":
        logger.warning("the budget ends before step %d of %d; the state is saved, and the same call goes on from "
                       "there", loop.step + 1, planned)
        loop.save(state_path, mine)
        return LearnRun(out, summary, finished=False)
    model.eval().to("cpu")  # a checkpoint loads anywhere
    final_config = config()
    final_config["learn"]["summary"] = summary.to_json()
    save_checkpoint(out, model, "minilm", model.pipeline, final_config)
    write_metrics(out, {"arch": "minilm", "learn": summary.to_json(), "dev": {metric: dev_after} if metric else None})
    summary_path.write_text(json.dumps({"fingerprint": fingerprint, "summary": summary.to_json()}, indent=2),
                            encoding="utf-8")
    state_path.unlink(missing_ok=True)
    logger.info("learn: %s", summary.line())
    return LearnRun(out, summary)


def step_seconds(settings: LearnSettings, data: LearnData, prefix: FrozenPrefix | None, device: str = "cpu",
                 threads: int = 2, steps: int = 3) -> float:
    """What one training step of ``settings`` on ``data`` takes here (the median of ``steps`` after a first one, on
    a throwaway model: the run's own weights and random state are not touched). What a budget plans by."""
    torch.set_num_threads(threads)
    rng = torch.get_rng_state()
    try:
        model = build_model(settings).to(device)
        vectors = PostVectors(model, prefix, settings.chunk_size, settings.train_len)
        loss_fn = InBatchSoftmaxLoss(scale=settings.scale, symmetric=settings.symmetric)
        optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=settings.lr)
        model.train()
        times = []
        for s in range(steps + 1):
            t0 = time.monotonic()
            optimizer.zero_grad()
            step_loss(vectors, _batch_at(data, settings, s), data.known, loss_fn, settings.mask_known).backward()
            optimizer.step()
            times.append(time.monotonic() - t0)
        return float(sorted(times[1:])[len(times[1:]) // 2])
    finally:
        torch.set_rng_state(rng)
