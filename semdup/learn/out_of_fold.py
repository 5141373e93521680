"""Out-of-fold scores: every labelled query scored by the fold model that never saw it.

For each fold of :mod:`semdup.data.learn_folds`, the base encoder is fine-tuned on the other folds
(:func:`~semdup.training.learn.trainer.learn_encoder`, resumable: a finished fold is reused, an interrupted one
goes on), then scores its own fold's queries the way the reranker does
(:func:`~semdup.learn.default_bundle.dev_groups`). The groups of all folds together are the only figures
``semdup learn`` chooses and gates on, so the choice and the gate see hundreds of queries, none of them judged by
a model that learned from it. That is checked twice before anything trains: the folds' sides share no post
(:func:`~semdup.data.learn_folds.check_out_of_fold`), and no fold's training groups name a post of its held side.

Example::

    oof = out_of_fold(folds, LearnSettings(), pipeline, idf, work, device="cpu")
    oof.groups[0].query_id, oof.fold_of[oof.groups[0].query_id], oof.runs[0].summary.line()
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from semdup.core.errors import DataError
from semdup.core.posts import Post
from semdup.data.learn_folds import LearnFolds, check_out_of_fold, side_post_ids
from semdup.learn.default_bundle import FitData, dev_groups
from semdup.learn.fusion_fit import Group
from semdup.training.learn.data import LearnData, learn_data
from semdup.training.learn.encoder import LearnedEncoder
from semdup.training.learn.frozen import FrozenPrefix
from semdup.training.learn.settings import LearnSettings, LearnSummary
from semdup.training.learn.trainer import Report, learn_encoder

__all__ = ["FoldRun", "OutOfFold", "FIT_KIND", "fit_data", "side_data", "out_of_fold"]

logger = logging.getLogger(__name__)

FIT_KIND = {"retrieval": "retrieval", "rerank": "semeval", "pairs": "pairs"}  # supervision kind -> FitData kind


@dataclass(frozen=True)
class FoldRun:
    """One fold model: its training summary, whether the work folder already held it, its time."""

    index: int
    summary: LearnSummary
    reused: bool
    seconds: float
    cpu_seconds: float


@dataclass(frozen=True)
class OutOfFold:
    """Every labelled query's group (in the labelled data's order), the fold that judged it, the fold runs.

    ``stopped``: None when every fold model is trained; else the summary of the fold model the budget stopped
    (saved: the same call goes on), and ``groups`` hold the queries of the folds finished before it only."""

    groups: list[Group]
    fold_of: dict[str, int]
    runs: list[FoldRun]
    stopped: LearnSummary | None = None
    stopped_fold: int | None = None
    steps_left: int = 0  # planned steps of the fold models not finished

    @property
    def complete(self) -> bool:
        return self.stopped is None


def fit_data(folds: LearnFolds, side: Any, name: str, posts: Sequence[Post]) -> FitData:
    """A side of ``folds`` as the fit and gate tools take it."""
    return FitData(name, FIT_KIND[folds.kind], side, list(posts))


def side_data(kind: str, side: Any, settings: LearnSettings) -> LearnData:
    """The training groups of a side (:func:`semdup.training.learn.data.learn_data`)."""
    return learn_data(kind, side, settings.hard_negatives, settings.seed)


def _check_training_side(folds: LearnFolds, index: int, data: LearnData, held: Any) -> None:
    trained = {p.id for g in data.groups for p in (g.query, g.positive)}
    leak = trained & side_post_ids(folds.kind, held)
    if leak:
        raise DataError(f"fold {index}'s model would train on {len(leak)} post(s) it is to judge (e.g. "
                        f"{sorted(leak)[0]}); out-of-fold figures must come from a model that never saw the query")


def _rekey(kind: str, groups: list[Group], keys: Sequence[str]) -> list[Group]:
    """A pair group is keyed by its position in the side it was built from; give it its key in the labelled
    data. Dump and rerank groups are keyed by the query's post id already."""
    if kind != "pairs":
        return groups
    return [dataclasses.replace(g, query_id=keys[int(g.query_id)]) for g in groups]


def out_of_fold(
    folds: LearnFolds,
    settings: LearnSettings,
    pipeline: Any,
    idf: np.ndarray,
    work: Path,
    posts: Sequence[Post],
    device: str = "cpu",
    threads: int = 2,
    deadline: float | None = None,
    title: bool = True,
    show_progress: bool = True,
    prefix: FrozenPrefix | None = None,
    report: Report | None = None,
) -> OutOfFold:
    """Train a model per fold without it and score the fold's queries with it (see the module doc).

    Args:
        folds: the labels cut into folds.
        settings: the fine-tuning recipe (each fold model trains ``settings.epochs`` over its own side).
        pipeline, idf: the bag-of-words pipeline and weights of the candidate bundle (for its cos_bow column).
        work: the work folder (``fold-<i>`` checkpoints, ``vectors`` cache).
        posts: every post whose text builds the vocabulary.
        device: ``cpu`` or ``cuda``; threads: torch CPU threads.
        deadline: ``time.monotonic()`` by which training must stop (None = none).
        title: compute the title vectors' cosine too.
        show_progress: progress bars on a terminal.
        prefix: the frozen bottom's cache shared by every fold model (:mod:`semdup.training.learn.frozen`).
        report: hears each fold model's progress lines (prefixed ``fold i of K``).

    Returns the queries of the folds finished when the deadline comes first (``stopped`` says where; every step is
    saved and the same call goes on).

    Raises:
        DataError: a model would judge a post it trained on.
    """
    check_out_of_fold(folds)
    datas = [side_data(folds.kind, f.train, settings) for f in folds.folds]
    for f, data in zip(folds.folds, datas, strict=True):
        _check_training_side(folds, f.index, data, f.held)
    by_key: dict[str, Group] = {}
    fold_of: dict[str, int] = {}
    runs = []
    for f, data in zip(folds.folds, datas, strict=True):
        w0, c0 = time.monotonic(), time.process_time()
        label = f"fold {f.index + 1} of {folds.k}"
        run = learn_encoder(settings, data, work / f"fold-{f.index}", deadline=deadline,
                            threads=threads, show_progress=show_progress, device=device,
                            extra_config={"fold": f.index, "folds": folds.k}, prefix=prefix,
                            report=None if report is None else (lambda line, at=label: report(f"{at}: {line}")))
        if not run.finished:
            done = [k for g in folds.folds[: f.index] for k in g.held_keys]
            left = run.summary.planned_steps - run.summary.steps + sum(
                settings.planned_steps(len(d.groups)) for d in datas[f.index + 1 :])
            return OutOfFold([by_key[k] for k in _ordered(folds, done) if k in by_key], fold_of, runs, run.summary,
                             f.index, left)
        encoder = LearnedEncoder(run.checkpoint_dir, device=device, prefix=prefix)
        groups, _, _ = dev_groups(encoder, pipeline, idf, fit_data(folds, f.held, f"fold {f.index}", posts),
                                  title=title, cache_dir=work / "vectors")
        for g in _rekey(folds.kind, groups, f.held_keys):
            by_key[g.query_id] = g
            fold_of[g.query_id] = f.index
        runs.append(FoldRun(f.index, run.summary, run.reused, time.monotonic() - w0, time.process_time() - c0))
        logger.info("fold %d of %d: %s; %d queries scored", f.index + 1, folds.k, run.summary.line(), len(groups))
    keys = _ordered(folds, [k for f in folds.folds for k in f.held_keys])
    return OutOfFold([by_key[k] for k in keys if k in by_key], fold_of, runs)


def _ordered(folds: LearnFolds, keys: list[str]) -> list[str]:
    """Query keys in the labelled data's order (a pair's key is its index in the labelled pairs)."""
    return sorted(keys, key=int) if folds.kind == "pairs" else keys
