"""Out-of-fold scores: every labelled query scored by the fold model that never saw it.

For each fold of :mod:`semdup.data.learn_folds`, the base encoder is fine-tuned on the other folds
(:func:`~semdup.training.learn.trainer.learn_encoder`, resumable: a finished fold is reused, an interrupted one
goes on), then scores its own fold's queries the way the reranker does
(:func:`~semdup.learn.default_bundle.dev_groups`). Given the folds' pools, each fold model also scores its fold
after every pass (the passes curve, :mod:`semdup.learn.pass_curve`), and each fold is scored by its model after the
passes best on the other folds. That scoring takes the vectors of the curve's point at those passes as they are
(:class:`~semdup.training.learn.encoder.KnownVectors`): on a big site the pool is most of the corpus, and encoding
it twice was a third of the folds' time. The groups of all folds together are the only figures
``semdup learn`` chooses and gates on, so the choice and the gate see hundreds of queries, none of them judged by
a model that learned from it. That is checked twice before anything trains: the folds' sides share no post
(:func:`~semdup.data.learn_folds.check_out_of_fold`), and no fold's training groups name a post of its held side.

Example::

    oof = out_of_fold(folds, LearnSettings(), pipeline, idf, work, device="cpu")
    oof.groups[0].query_id, oof.fold_of[oof.groups[0].query_id], oof.runs[0].summary.line()
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from semdup.core.errors import DataError
from semdup.core.posts import Post
from semdup.data.learn_folds import LearnFolds, check_out_of_fold, side_post_ids
from semdup.learn.default_bundle import FitData, dev_groups
from semdup.learn.fusion_fit import Group
from semdup.learn.pass_curve import PassChoice, PassPool, choose_passes
from semdup.training.learn.data import LearnData, learn_data
from semdup.training.learn.encoder import KnownVectors, LearnedEncoder
from semdup.training.learn.frozen import FrozenPrefix, PostVectors
from semdup.training.learn.settings import LearnSettings, LearnSummary
from semdup.training.learn.trainer import Report, learn_encoder, pass_dir

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
    passes: PassChoice | None = None  # the passes each fold was judged at and the final model's (with pools)

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
    pools: Mapping[int, PassPool] | None = None,
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
        pools: fold -> its queries' pool (:class:`~semdup.learn.pass_curve.PassPool`): each fold model scores it
            after every pass, and each fold is judged by its model after the passes best on the other folds
            (``passes`` of the result: the choice and the curve). None: judged after the last step.

    Returns the queries of the folds finished when the deadline comes first (``stopped`` says where; every step is
    saved and the same call goes on).

    Raises:
        DataError: a model would judge a post it trained on.
    """
    check_out_of_fold(folds)
    datas = [side_data(folds.kind, f.train, settings) for f in folds.folds]
    for f, data in zip(folds.folds, datas, strict=True):
        _check_training_side(folds, f.index, data, f.held)
    runs: list[FoldRun] = []
    curves: dict[int, dict[float, dict[str, float]]] = {}
    for f, data in zip(folds.folds, datas, strict=True):
        w0, c0 = time.monotonic(), time.process_time()
        label = f"fold {f.index + 1} of {folds.k}"
        fold_dir = work / f"fold-{f.index}"
        pool = None if pools is None else pools.get(f.index)
        curves[f.index] = _read_curve(fold_dir)
        run = learn_encoder(settings, data, fold_dir, deadline=deadline,
                            threads=threads, show_progress=show_progress, device=device,
                            extra_config={"fold": f.index, "folds": folds.k}, prefix=prefix,
                            report=None if report is None else (lambda line, at=label: report(f"{at}: {line}")),
                            on_pass=None if pool is None else _curve_point(pool, prefix, fold_dir, curves[f.index]))
        if not run.finished:
            done = folds.folds[: f.index]
            by_key, fold_of = _score(folds, done, {g.index: None for g in done}, work, posts, pipeline, idf, device,
                                     prefix, title)
            left = run.summary.planned_steps - run.summary.steps + sum(
                settings.planned_steps(len(d.groups)) for d in datas[f.index + 1 :])
            keys = _ordered(folds, [k for g in done for k in g.held_keys])
            return OutOfFold([by_key[k] for k in keys if k in by_key], fold_of, runs, run.summary, f.index, left)
        runs.append(FoldRun(f.index, run.summary, run.reused, time.monotonic() - w0, time.process_time() - c0))
        logger.info("fold %d of %d: %s", f.index + 1, folds.k, run.summary.line())
    choice = choose_passes(curves) if pools is not None and all(curves.values()) else None
    at = {f.index: None if choice is None else choice.per_fold[f.index] for f in folds.folds}
    by_key, fold_of = _score(folds, folds.folds, at, work, posts, pipeline, idf, device, prefix, title)
    if choice is not None:
        logger.info("%s", choice.line())
    keys = _ordered(folds, [k for f in folds.folds for k in f.held_keys])
    return OutOfFold([by_key[k] for k in keys if k in by_key], fold_of, runs, passes=choice)


CURVE_FILE = "curve.json"
CURVE_VECTORS = "curve-vectors"  # <passes>.npz: the pool's vectors at each point, which the scoring reuses


def _curve_vectors(fold_dir: Path, passes: float) -> Path:
    return fold_dir / CURVE_VECTORS / f"{passes:g}.npz"


def _read_curve(fold_dir: Path) -> dict[float, dict[str, float]]:
    """The points a fold model already scored (a resumed or finished fold keeps its curve)."""
    path = fold_dir / CURVE_FILE
    if not path.exists():
        return {}
    return {float(p): dict(v) for p, v in json.loads(path.read_text(encoding="utf-8")).items()}


def _curve_point(pool: PassPool, prefix: FrozenPrefix | None, fold_dir: Path,
                 curve: dict[float, dict[str, float]]) -> Any:
    """The fold model's pass hook: its encoder alone on the fold's pool, kept in ``curve`` and ``curve.json``."""

    def point(model: Any, passes: float) -> dict[str, float]:
        vectors = PostVectors(model, prefix, chunk_size=64)

        def encode(posts: Sequence[Post]) -> np.ndarray:
            x = vectors(posts).cpu().numpy().astype(np.float32)
            KnownVectors.of(posts, x).save(_curve_vectors(fold_dir, passes))
            return x

        curve[passes] = pool.score(encode)
        fold_dir.mkdir(parents=True, exist_ok=True)
        (fold_dir / CURVE_FILE).write_text(json.dumps({f"{p:g}": v for p, v in curve.items()}), encoding="utf-8")
        return {"figure": round(float(np.mean(list(curve[passes].values()))), 4) if curve[passes] else None}

    return point


def _score(folds: LearnFolds, which: Sequence[Any], at: dict[int, float | None], work: Path, posts: Sequence[Post],
           pipeline: Any, idf: np.ndarray, device: str, prefix: FrozenPrefix | None, title: bool
           ) -> tuple[dict[str, Group], dict[str, int]]:
    """Each fold of ``which`` scored by its model after ``at[fold]`` passes (None: its last step), taking the
    vectors of its curve's point there as they are."""
    by_key: dict[str, Group] = {}
    fold_of: dict[str, int] = {}
    for f in which:
        fold_dir = work / f"fold-{f.index}"
        passes = at.get(f.index)
        known = None if passes is None else KnownVectors.load(_curve_vectors(fold_dir, passes))
        encoder = LearnedEncoder(fold_dir if passes is None else pass_dir(fold_dir, passes), device=device,
                                 prefix=prefix, known=known)
        groups, _, _ = dev_groups(encoder, pipeline, idf, fit_data(folds, f.held, f"fold {f.index}", posts),
                                  title=title, cache_dir=work / "vectors")
        for g in _rekey(folds.kind, groups, f.held_keys):
            by_key[g.query_id] = g
            fold_of[g.query_id] = f.index
        logger.info("fold %d of %d: %d queries scored (%s passes)", f.index + 1, folds.k, len(groups),
                    "all" if passes is None else f"{passes:g}")
    return by_key, fold_of


def _ordered(folds: LearnFolds, keys: list[str]) -> list[str]:
    """Query keys in the labelled data's order (a pair's key is its index in the labelled pairs)."""
    return sorted(keys, key=int) if folds.kind == "pairs" else keys
