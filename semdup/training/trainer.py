"""How every registered architecture trains (on :mod:`semdup.training.loop`): seeds, epochs, early stopping on
dev, the best checkpoint.

One epoch walks the training groups (ranking losses) or labelled pairs (pair losses) in a seeded
random order; ``evals_per_epoch`` times an epoch the model is scored on dev through the same
:class:`~semdup.training.checkpoint.CheckpointScorer` serving-side code path, and the best check's
weights are kept. At the end the best weights are reloaded, the final evaluation (dev and test,
threshold choice) runs once, and the checkpoint plus ``metrics.json`` are written.

Example::

    settings = TrainSettings(arch="bow-cnn", epochs=10, lr=1e-3)
    result = train(settings, data, evaluate_dev=lambda s: eval_travel(s, dump, "dev"),
                   dev_metric="MAP", out_dir="artifacts/bow-cnn-travel")
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from semdup.core.errors import ConfigError, DataError
from semdup.core.inputs import build_inputs
from semdup.core.posts import Post
from semdup.core.progress import progress
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary
from semdup.training.cached_pipeline import CachedTextPipeline
from semdup.training.checkpoint import CheckpointScorer, save_checkpoint, write_metrics
from semdup.training.fusion_choice import best_dense_scale
from semdup.training.loop import KeepBest, Loop
from semdup.training.models._base import EncoderModel
from semdup.training.pairs import TrainingData
from semdup.training.registry import ArchSpec, get_arch

__all__ = ["TrainSettings", "TrainResult", "CachedTextPipeline", "set_seeds", "build_pipeline", "train"]

logger = logging.getLogger(__name__)

OPTIMIZERS = ("adam", "sgd")
LOSSES = ("in-batch",)


@dataclass(frozen=True)
class TrainSettings:
    """Everything that changes a training run (saved in the checkpoint's config).

    Args:
        arch: registered architecture name.
        epochs: maximum epochs.
        lr: learning rate.
        optimizer: ``"adam"`` or ``"sgd"`` (the paper's choice for BOW-CNN/CNN).
        batch_size: groups or pairs per step.
        negatives: K negatives per group (ranking losses).
        patience: epochs without dev improvement before stopping.
        seed: seed of Python, numpy and torch.
        weight_decay: L2 penalty.
        max_grad_norm: gradient clipping (0 disables).
        hparams: model hyper-parameter overrides on top of the arch's defaults.
        max_tokens: tokens per post (pipeline ``max_tokens``); None keeps the arch/pipeline default.
        min_df: vocabulary minimum document frequency.
        max_steps_per_epoch: cap on steps per epoch (tests, quick runs); None = all.
        threads: torch intra-op threads.
        term_lr: learning rate of the BOW term weights t (None = ``lr``). A lower one keeps t near
            its IDF start, which is what the BOW path's quality rests on.
        evals_per_epoch: dev evaluations per epoch (early stopping and the best checkpoint are
            chosen among them); 2 = every half epoch.
        dense_scales: models with both a BOW and a dense path: at each dev evaluation also try
            β_dense × s for these s and keep the best (see ``fusion_choice``); () = off.
        loss: ``None`` = the arch's own loss; ``"in-batch"`` = :class:`InBatchSoftmaxLoss` (dense encoders:
            every candidate of the batch is a negative for the other queries).
        device: torch device of training and dev scoring (``"cuda"`` on a GPU machine); the checkpoint is
            always written from CPU tensors, so it loads anywhere.
        ema_decay: 0 = off; in (0, 1): dev checks, the best checkpoint and the saved weights are a
            bias-corrected moving average of the weights over about 1 / (1 - ema_decay) steps
            (:class:`~semdup.training.loop.WeightAverage`): still one checkpoint.
        fresh_negatives: ranking losses: draw the random negatives again every epoch (the data's
            ``resample_groups``; Travel) instead of one draw up front that a second epoch memorises.
    """

    arch: str
    epochs: int = 10
    lr: float = 1e-3
    optimizer: str = "adam"
    batch_size: int = 16
    negatives: int = 20
    patience: int = 3
    seed: int = 0
    weight_decay: float = 0.0
    max_grad_norm: float = 5.0
    hparams: Mapping[str, Any] = field(default_factory=dict)
    max_tokens: int | None = None
    min_df: int = 1
    max_steps_per_epoch: int | None = None
    threads: int = 2
    term_lr: float | None = None
    evals_per_epoch: int = 1
    dense_scales: tuple[float, ...] = ()
    device: str = "cpu"
    loss: str | None = None
    ema_decay: float = 0.0
    fresh_negatives: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.ema_decay < 1.0:
            raise ConfigError(f"ema_decay must lie in [0, 1) (0 = off), got {self.ema_decay}")
        if self.loss not in (None, *LOSSES):
            raise ConfigError(f"loss {self.loss!r} is not one of {sorted(LOSSES)} (or the arch's own)")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"optimizer {self.optimizer!r} is not one of {OPTIMIZERS}")
        if self.evals_per_epoch < 1 or (self.term_lr is not None and self.term_lr < 0):
            raise ConfigError(
                f"need evals_per_epoch >= 1 and term_lr >= 0; got {self.evals_per_epoch}, {self.term_lr}"
            )
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ConfigError(
                f"need epochs >= 1, batch_size >= 1, lr > 0; got {self.epochs}, {self.batch_size}, {self.lr}"
            )

    @classmethod
    def for_arch(cls, arch: str, **overrides: Any) -> TrainSettings:
        """Settings from the arch's ``train_defaults``, then ``overrides`` (None values ignored)."""
        spec = get_arch(arch)
        known = set(cls.__dataclass_fields__)
        values = {k: v for k, v in spec.train_defaults.items() if k in known}
        values.update({k: v for k, v in overrides.items() if v is not None})
        unknown = set(values) - known
        if unknown:
            raise ConfigError(f"unknown training settings {sorted(unknown)}; known: {sorted(known)}")
        return cls(arch=arch, **{k: v for k, v in values.items() if k != "arch"})


@dataclass(frozen=True)
class TrainResult:
    """What a run produced: the checkpoint directory, the best epoch, its dev figure and the curve."""

    out_dir: Path
    best_epoch: float
    best_dev: float
    curve: list[dict[str, Any]]
    metrics: dict[str, Any]


def set_seeds(seed: int) -> None:
    """Seed Python, numpy and torch (CPU) so a run repeats."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_pipeline(spec: ArchSpec, settings: TrainSettings, vocab_posts: Sequence[Post]) -> CachedTextPipeline:
    """The arch's pipeline settings plus a vocabulary built from ``vocab_posts`` (training side only)."""
    ps = dict(spec.pipeline_defaults)
    if settings.max_tokens is not None:
        ps["max_tokens"] = settings.max_tokens
    pipe = CachedTextPipeline(TextPipelineSettings.from_dict(ps))
    docs = [pipe.text_tokens(p) for p in progress(vocab_posts, desc="vocabulary", unit="post", leave=False)]
    vocab = Vocabulary.build(docs, min_df=settings.min_df)
    if len(vocab) <= 2:
        raise DataError("the training posts gave an empty vocabulary; check the training data paths")
    logger.info("vocabulary: %d tokens from %d posts (min_df=%d)", len(vocab), len(docs), settings.min_df)
    out = CachedTextPipeline(pipe.settings, vocab)
    out._post_cache, out._text_cache = pipe._post_cache, pipe._text_cache
    return out


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _tensors(
    kind: str, pipeline: TextPipeline, posts: Sequence[Post], bow: bool, device: torch.device
) -> dict[str, torch.Tensor]:
    arrays = build_inputs(kind, pipeline, posts, with_bow=bow)
    return {k: torch.from_numpy(v).to(device, non_blocking=True) for k, v in arrays.items()}


def _group_loss(
    model: EncoderModel, loss_fn: torch.nn.Module, pipeline: TextPipeline, batch: Sequence[Any]
) -> torch.Tensor:
    k = min(len(g.negatives) for g in batch)
    if k == 0:
        raise DataError("a training group has no negative; the data set is too small to sample negatives from")
    queries = [g.query for g in batch]
    cands = [p for g in batch for p in (g.positive, *g.negatives[:k])]
    dev = _device(model)
    q = model.encode(_tensors(model.input_kind, pipeline, queries, model.uses_bow, dev))  # B rows
    c = model.encode(_tensors(model.input_kind, pipeline, cands, model.uses_bow, dev))  # B*(1+k) rows
    if getattr(loss_fn, "in_batch", False):
        if q.dense is None or model.uses_bow:
            raise ConfigError("the in-batch loss scores dense vectors only; use it with a dense-only arch (minilm)")
        qn = torch.nn.functional.normalize(q.dense, dim=-1)
        cn = torch.nn.functional.normalize(c.dense, dim=-1)
        targets = torch.arange(len(batch), device=qn.device) * (1 + k)  # each query's own positive
        return loss_fn(qn @ cn.T, targets)  # (B, B*(1+k))
    scores = model.score_encoded(q.repeat_rows(1 + k), c).view(len(batch), 1 + k)  # (B, 1+k)
    return loss_fn(scores)


def _pair_loss(
    model: EncoderModel, loss_fn: torch.nn.Module, pipeline: TextPipeline, batch: Sequence[Any]
) -> torch.Tensor:
    dev = _device(model)
    q = _tensors(model.input_kind, pipeline, [p.query for p in batch], model.uses_bow, dev)
    c = _tensors(model.input_kind, pipeline, [p.candidate for p in batch], model.uses_bow, dev)
    labels = torch.tensor([p.label for p in batch], dtype=torch.float32, device=dev)
    return loss_fn(model.score(q, c), labels)


def _optimizer(model: EncoderModel, settings: TrainSettings) -> torch.optim.Optimizer:
    """Adam or SGD; the term weights t get ``term_lr`` (no weight decay: decay would pull t to 0, not to IDF)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups: list[dict[str, Any]] = [{"params": [p for n, p in named if n != "term_weight"]}]
    terms = [p for n, p in named if n == "term_weight"]
    if terms:
        term_lr = settings.lr if settings.term_lr is None else settings.term_lr
        groups.append({"params": terms, "lr": term_lr, "weight_decay": 0.0})
    groups = [g for g in groups if g["params"]]
    if settings.optimizer == "adam":
        return torch.optim.Adam(groups, lr=settings.lr, weight_decay=settings.weight_decay)
    return torch.optim.SGD(groups, lr=settings.lr, weight_decay=settings.weight_decay)


def _scale_dense_weight(model: EncoderModel, scale: float) -> None:
    """β_dense ← β_dense × scale in the model itself, so the checkpoint's fusion carries the choice."""
    before = model.fusion()["beta_dense"]
    model.scale_dense(scale)
    after = model.fusion()["beta_dense"]
    if abs(after - before * scale) > 1e-6 * max(1.0, abs(before * scale)):
        raise RuntimeError(
            f"{type(model).__name__}.scale_dense did not scale β_dense: {before} × {scale} gave {after}"
        )


def train(
    settings: TrainSettings,
    data: TrainingData,
    evaluate_dev: Callable[[CheckpointScorer], Mapping[str, float]],
    dev_metric: str,
    out_dir: str | Path,
    evaluate_final: Callable[[CheckpointScorer], dict[str, Any]] | None = None,
    extra_config: Mapping[str, Any] | None = None,
) -> TrainResult:
    """Train ``settings.arch`` on ``data`` with early stopping on ``evaluate_dev(scorer)[dev_metric]``.

    Args:
        settings: the run's settings.
        data: training groups/pairs and the vocabulary posts.
        evaluate_dev: dev figures of a scorer (higher ``dev_metric`` is better).
        dev_metric: the key of ``evaluate_dev``'s result to maximise.
        out_dir: checkpoint directory (written at the end, best epoch's weights).
        evaluate_final: run once on the best model; returns ``{"dev": ..., "test": ..., "threshold": ...}``.
        extra_config: more entries for config.json (data paths, ...).
    """
    torch.set_num_threads(settings.threads)
    set_seeds(settings.seed)
    spec = get_arch(settings.arch)
    pipeline = build_pipeline(spec, settings, data.vocab_posts)
    model = spec.model_class.from_hparams({**spec.defaults, **dict(settings.hparams)}, pipeline)
    model.to(settings.device)
    if settings.loss == "in-batch":
        from semdup.training.losses.in_batch import InBatchSoftmaxLoss

        if spec.batch_format != "groups":
            raise ConfigError(f"the in-batch loss needs groups; {settings.arch} trains on {spec.batch_format}")
        loss_fn: torch.nn.Module = InBatchSoftmaxLoss().to(settings.device)
    else:
        loss_fn = spec.loss_class(**spec.loss_defaults).to(settings.device)
    items = list(data.groups if spec.batch_format == "groups" else data.pairs)
    if not items:
        raise DataError(f"no training {spec.batch_format} for {settings.arch}; check the training data")
    step_fn = _group_loss if spec.batch_format == "groups" else _pair_loss
    if settings.fresh_negatives and (spec.batch_format != "groups" or data.resample_groups is None):
        raise ConfigError(
            "fresh_negatives needs a ranking loss (groups) and a data set that can redraw negatives (Travel); "
            f"{settings.arch} trains on {spec.batch_format}, redraw available: {data.resample_groups is not None}"
        )
    opt = _optimizer(model, settings)
    loop = Loop(model, lambda batch: step_fn(model, loss_fn, pipeline, batch), opt,
                max_grad_norm=settings.max_grad_norm, ema_decay=settings.ema_decay)
    logger.info("training %s on %d %s, %d parameters", settings.arch, len(items), spec.batch_format,
                sum(p.numel() for p in loop.params))
    rng = random.Random(settings.seed)
    curve: list[dict[str, Any]] = []
    best, best_epoch, best_scale = KeepBest(), 0.0, 1.0
    tune_scale = bool(settings.dense_scales) and model.uses_bow and model.dense_encoder() is not None
    penalty = getattr(model, "penalty", None)  # BOW-CNN's ‖t − IDF‖²

    def after_step(_batch: Any, _loss: float) -> bool:  # reads the epoch's variables set by the for loop below
        nonlocal best_epoch, best_scale
        step = loop.step - first
        if step not in eval_at:
            return False
        scale, by_scale = 1.0, None
        with loop.evaluating():
            scorer = CheckpointScorer(model, pipeline)
            if tune_scale:
                scale, dev, by_scale = best_dense_scale(scorer, evaluate_dev, dev_metric, settings.dense_scales)
            else:
                dev = dict(evaluate_dev(scorer))
            if dev_metric not in dev:
                raise ConfigError(f"dev evaluation gave {sorted(dev)}, not the early-stopping metric {dev_metric!r}")
            improved = best.update(dev[dev_metric], model)
        point: float = epoch if step == len(batches) else round(epoch - 1 + step / len(batches), 2)
        row = {"epoch": point, "loss": float(np.mean(loop.losses[first:])), "dev": dev,
               "seconds": round(time.monotonic() - t0, 1)}
        if by_scale is not None:
            row.update(dense_scale=scale, dev_by_dense_scale={str(k): v for k, v in by_scale.items()})
        curve.append(row)
        logger.info("epoch %g: loss %.4f dev %s %.2f (%.0fs)", point, row["loss"], dev_metric, dev[dev_metric],
                    row["seconds"])
        if improved:
            best_epoch, best_scale = point, scale
        elif best.since >= settings.patience * n_eval:
            logger.info("early stop at epoch %g (best %g: %s %.2f)", point, best_epoch, dev_metric, best.value)
            return True
        return False

    for epoch in range(1, settings.epochs + 1):
        t0, first = time.monotonic(), loop.step
        if settings.fresh_negatives and epoch > 1:
            items = list(data.resample_groups(epoch))  # type: ignore[misc]  # checked above
        rng.shuffle(items)
        batches = [items[i : i + settings.batch_size] for i in range(0, len(items), settings.batch_size)]
        batches = batches[: settings.max_steps_per_epoch or None]
        n_eval = min(settings.evals_per_epoch, len(batches))
        eval_at = {round(len(batches) * (j + 1) / n_eval) for j in range(n_eval)}
        loop.desc = f"epoch {epoch}/{settings.epochs}"
        if loop.run(batches, after_step=after_step, penalty=penalty) == "stopped":
            break
    best_dev = best.value
    model.load_state_dict(best.state)
    if tune_scale and best_scale != 1.0:
        _scale_dense_weight(model, best_scale)
        logger.info("β_dense scaled by %g (chosen on dev): fusion %s", best_scale, model.fusion())
    model.eval()
    final: dict[str, Any] = {}
    if evaluate_final is not None:
        with torch.no_grad():
            final = dict(evaluate_final(CheckpointScorer(model, pipeline)))
    config = {
        "loss": {"class": type(loss_fn).__name__, **loss_fn.get_config_dict()},
        "batch_format": spec.batch_format,
        "train": {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in asdict(settings).items()},
        "seed": settings.seed,
        "data": data.summary,
        "best_epoch": best_epoch,
        "dense_scale": best_scale if tune_scale else None,
        "threshold": final.get("threshold"),
        **dict(extra_config or {}),
    }
    model.to("cpu")
    out = save_checkpoint(out_dir, model, settings.arch, pipeline, config)
    metrics = {
        "arch": settings.arch,
        "best_epoch": best_epoch,
        f"best_dev_{dev_metric}": best_dev,
        "dense_scale": best_scale if tune_scale else None,
        "curve": curve,
        **final,
    }
    write_metrics(out, metrics)
    return TrainResult(out, best_epoch, best_dev, curve, metrics)
