"""``semdup learn``'s core: a site's own labels in, a verified candidate bundle and the gate's decision out.

    labels ─ split (time / cluster) ─┬─ training side ─ fine-tune (budget) ─ export ─┐
                                     │                                               ├─ fusion ─ gate ─ candidate
                                     └─ held-out side ───────────────────────────────┘

1. :func:`~semdup.data.supervision_split.split_supervision` holds out queries (or the caller gives the split).
2. The bundle to beat is scored on the held-out queries: the caller's current bundle, or else the untrained
   default (the base encoder + IDF + a fusion fitted on the *training* side's queries, written beside the
   candidate so it can be shipped instead).
3. :func:`~semdup.training.learn.trainer.learn_encoder` fine-tunes the base encoder on the training side in what
   is left of ``budget_minutes`` once the export and the fit are reserved (measured on the bundle to beat).
4. The checkpoint goes through the verified export path (:func:`~semdup.export.onnx_export.export_checkpoint`:
   ONNX, parity with torch), then the hybrid's fusion (β_bow, α, β_title) is chosen on the held-out queries;
   the gate's figures for it are cross-fitted (:func:`~semdup.export.gate.cross_fitted_figures`).
5. :func:`~semdup.export.gate.gate` compares the two query by query (paired randomisation test).
6. The candidate is written as a verified bundle (:func:`~semdup.export.default_bundle.write_default_bundle`)
   whatever the decision, with the decision, the split, the sources' counts and the run's summary in its manifest
   (``learn``); promoting it is the caller's step (``semdup upgrade``), taken only when ``decision.accept``.

Plain arguments only (no environment, no printing): the CLI reads the options and prints what this returns.

Example::

    sup = load_supervision("/data/site-dump")
    out = learn_bundle(sup, "artifacts/learn/candidate", base_bundle="artifacts/bundles/minilm",
                       work_dir="artifacts/learn/work", budget_minutes=30)
    out.decision.accept, out.decision.line(), out.summary.line()
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from semdup.bundle.bundle import Bundle
from semdup.core.fitting import best_threshold
from semdup.core.fusion_fit import GRID_TITLE, FusionFit, Group, choose_fusion, group_scores
from semdup.core.posts import Post
from semdup.data.supervision import SourceReport, Supervision
from semdup.data.supervision_split import LearnSplit, SplitReport, split_supervision
from semdup.export.default_bundle import FitData, dev_groups, idf_pipeline, write_default_bundle
from semdup.export.gate import GateDecision, cross_fitted_figures, figures_from_predictions, gate, per_query_figures
from semdup.export.onnx_export import export_checkpoint
from semdup.training.learn.data import learn_data
from semdup.training.learn.settings import LearnSettings, LearnSummary
from semdup.training.learn.trainer import learn_encoder

__all__ = ["LearnOutcome", "learn_bundle", "fit_data", "DENSE_ONLY"]

logger = logging.getLogger(__name__)

DENSE_ONLY = {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.0}
_FIT_KIND = {"retrieval": "retrieval", "rerank": "semeval", "pairs": "pairs"}


@dataclass(frozen=True)
class LearnOutcome:
    """What :func:`learn_bundle` wrote and decided.

    Attributes:
        candidate_dir: the candidate bundle (verified).
        version: its version.
        decision: the gate's (``accept`` = it may replace the compared bundle).
        compared_with: the version of the bundle it was compared with (the current one, or the untrained default).
        default_dir: the untrained default written beside it (None when a current bundle was given).
        fusion: the candidate's fusion weights (chosen on the held-out queries).
        held_out_figures: mean held-out figure per system: ``current``, ``candidate`` (cross-fitted),
            ``base_dense`` and ``learned_dense`` (the encoders alone, before and after training).
        summary: the training run's summary.
        reused: the work folder already held this finished training run (nothing was trained).
        source: what the labels held.
        split: how they were split.
        seconds: wall seconds per phase; cpu_seconds: this process's CPU seconds per phase.
    """

    candidate_dir: Path
    version: str
    decision: GateDecision
    compared_with: str
    default_dir: Path | None
    fusion: dict[str, float]
    held_out_figures: dict[str, float]
    summary: LearnSummary
    reused: bool
    source: SourceReport
    split: SplitReport
    seconds: dict[str, float] = field(default_factory=dict)
    cpu_seconds: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"candidate": str(self.candidate_dir), "version": self.version, "decision": self.decision.to_json(),
                "compared_with": self.compared_with, "default": str(self.default_dir) if self.default_dir else None,
                "fusion": self.fusion, "held_out": self.held_out_figures, "summary": self.summary.to_json(),
                "reused": self.reused,
                "source": self.source.to_json(), "split": self.split.to_json(), "seconds": self.seconds,
                "cpu_seconds": self.cpu_seconds}


def fit_data(kind: str, side: Any, name: str, posts: Sequence[Post] = ()) -> FitData:
    """One side of a :class:`~semdup.data.supervision_split.LearnSplit` as the fit and gate tools take it."""
    return FitData(name, _FIT_KIND[kind], side, list(posts))


class _Clock:
    """Wall and CPU seconds per phase."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.start = time.monotonic()

    def phase(self, name: str, wall0: float, cpu0: float) -> None:
        self.wall[name] = round(time.monotonic() - wall0, 1)
        self.cpu[name] = round(time.process_time() - cpu0, 1)

    def left(self, budget_minutes: float) -> float:
        return budget_minutes - (time.monotonic() - self.start) / 60.0


def _mean(figures: Mapping[str, float]) -> float:
    return float(np.mean(list(figures.values()))) if figures else float("nan")


def _fit(groups: Sequence[Group], data: FitData, grid_title: Sequence[float]) -> FusionFit:
    """The grid's best fusion on ``groups`` by the data's own measure (the mean per-query figure)."""
    return choose_fusion(groups, lambda preds: _mean(figures_from_predictions(preds, groups, data, None)),
                         "held-out figure", grid_title=grid_title)


def _threshold(groups: Sequence[Group], fusion: Mapping[str, float], data: FitData) -> float | None:
    if data.kind != "pairs":
        return None
    preds = group_scores(groups, fusion)
    return best_threshold([next(iter(preds[g.query_id].values())) for g in groups],
                          [p.duplicate for p in data.dev])[0]


def _current(current_bundle: str | Path, held: FitData) -> tuple[str, dict[str, float]]:
    bundle = Bundle.load(current_bundle)
    t = bundle.term_weights if bundle.term_weights is not None else np.zeros(len(bundle.pipeline.vocab), np.float32)
    groups, _, _ = dev_groups(bundle, bundle.pipeline, t, held, title=bool(bundle.fusion.get("beta_title")))
    return bundle.version, per_query_figures(groups, bundle.fusion, held, bundle.threshold)


def learn_bundle(
    sup: Supervision,
    out_dir: str | Path,
    base_bundle: str | Path,
    work_dir: str | Path,
    settings: LearnSettings | None = None,
    budget_minutes: float = 30.0,
    current_bundle: str | Path | None = None,
    split: LearnSplit | None = None,
    corpus: Sequence[Post] = (),
    alpha: float = 0.05,
    folds: int = 2,
    threads: int = 2,
    grid_title: Sequence[float] = GRID_TITLE,
    show_progress: bool = True,
) -> LearnOutcome:
    """Learn from ``sup``, write the candidate bundle to ``out_dir`` and decide (see the module doc).

    Args:
        sup: the site's labels (:func:`semdup.data.supervision.load_supervision`).
        out_dir: the candidate bundle's folder (replaced if it exists).
        base_bundle: the base encoder's bundle (``semdup export --base-encoder minilm``): what is fine-tuned is
            its encoder (``settings.base_encoder`` must name it), and the untrained default is built from it.
        work_dir: checkpoints (a rerun resumes there), the exported encoder and the untrained default.
        settings: the fine-tuning recipe (default :class:`LearnSettings`, the dev-chosen one).
        budget_minutes: wall-clock minutes for the whole call; training gets what the rest does not need.
        current_bundle: the bundle in service, to beat; None = the untrained default.
        split: the split to use; None = :func:`split_supervision` with its defaults.
        corpus: posts to be indexed, added to the IDF vocabulary (no labels read).
        alpha: the gate's significance level.
        folds: cross-fitting folds of the candidate's fusion.
        threads: torch threads for training.
        grid_title: β_title values the fusion may take (``(0.0,)``: no title term).
        show_progress: progress bars on a terminal.
    """
    clock = _Clock()
    settings = settings or LearnSettings()
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    w0, c0 = time.monotonic(), time.process_time()
    split = split or split_supervision(sup)
    posts = sup.posts() + list(corpus)
    held = fit_data(split.kind, split.held_out, "held-out", posts)
    train_side = fit_data(split.kind, split.train, "train", posts)
    base = Bundle.load(base_bundle)
    base_name = (base.manifest.get("base_encoder") or {}).get("name")
    if base_name and base_name != settings.base_encoder:
        raise ValueError(f"the base bundle holds {base_name!r} but the recipe fine-tunes {settings.base_encoder!r}; "
                         "give the base encoder's own bundle")
    pipeline, idf = idf_pipeline(base, posts)
    cache = work / "vectors"  # a dump's corpus is encoded once per bundle, whichever side asks
    base_groups, _, _ = dev_groups(base, pipeline, idf, held, title=any(grid_title), cache_dir=cache)
    default_dir = None
    if current_bundle is None:
        fit_groups, _, _ = dev_groups(base, pipeline, idf, train_side, title=any(grid_title), cache_dir=cache)
        default_fit = _fit(fit_groups, train_side, grid_title)
        default_dir = work / "untrained-default"
        written = write_default_bundle(base_bundle, default_dir, pipeline, idf, default_fit, sup.report.source,
                                       _threshold(base_groups, default_fit.fusion, held) if held.kind == "pairs"
                                       else None)
        compared_with = written.version
        current = per_query_figures(base_groups, default_fit.fusion, held, written.threshold)
    else:
        compared_with, current = _current(current_bundle, held)
    base_dense = per_query_figures(base_groups, DENSE_ONLY, held)
    clock.phase("split_and_current", w0, c0)
    # the candidate's own export + fit costs about what scoring the held-out side cost, plus the export
    reserve = 2.0 * clock.wall["split_and_current"] / 60.0 + 1.5
    w0, c0 = time.monotonic(), time.process_time()
    data = learn_data(split.kind, split.train, settings.hard_negatives, settings.seed)
    run = learn_encoder(settings, data, work / "checkpoint", budget_minutes=max(clock.left(budget_minutes) - reserve,
                                                                               0.5),
                        threads=threads, show_progress=show_progress,
                        extra_config={"data_set": sup.report.source, "split": split.report.to_json()})
    clock.phase("train", w0, c0)
    w0, c0 = time.monotonic(), time.process_time()
    encoder = export_checkpoint(run.checkpoint_dir, work / "encoder")
    clock.phase("export", w0, c0)
    w0, c0 = time.monotonic(), time.process_time()
    learned = Bundle.load(encoder.bundle_dir)
    new_groups, _, _ = dev_groups(learned, pipeline, idf, held, title=any(grid_title), cache_dir=cache)
    candidate, fold_fusions = cross_fitted_figures(new_groups, held, folds=folds, grid_title=grid_title)
    final = _fit(new_groups, held, grid_title)
    learned_dense = per_query_figures(new_groups, DENSE_ONLY, held)
    decision = gate(current, candidate, metric="MAP" if held.kind != "pairs" else "accuracy", alpha=alpha)
    clock.phase("fit_and_gate", w0, c0)
    figures = {"current": _mean(current), "candidate": _mean(candidate), "base_dense": _mean(base_dense),
               "learned_dense": _mean(learned_dense)}
    summary = LearnSummary(**{**run.summary.to_json(), "dev_metric": decision.metric,
                              "dev_before": figures["current"], "dev_after": figures["candidate"]})
    record = {"settings": settings.to_json(), "summary": summary.record(), "gate": decision.to_json(),
              "compared_with": compared_with, "held_out": figures, "fold_fusions": fold_fusions,
              "source": sup.report.to_json(), "split": split.report.to_json(), "candidate": True}
    w0, c0 = time.monotonic(), time.process_time()
    bundle = write_default_bundle(encoder.bundle_dir, out_dir, pipeline, idf, final, sup.report.source,
                                  _threshold(new_groups, final.fusion, held), extra={"learn": record})
    clock.phase("write", w0, c0)
    logger.info("learn: %s; %s", summary.line(), decision.line())
    return LearnOutcome(Path(out_dir), bundle.version, decision, compared_with, default_dir, dict(final.fusion),
                        figures, summary, run.reused, sup.report, split.report, clock.wall, clock.cpu)
