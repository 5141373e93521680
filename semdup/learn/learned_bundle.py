"""``semdup learn``'s core: a site's own labels in; the gate's decision, and a verified bundle when it accepts, out.

    labels ─ K folds ─┬─ the bundle to beat, scored on every labelled query (cross-fitted) ───────────┐
                      ├─ K fold models, each scoring the fold it never saw (out of fold) ─ candidates ─┴─ gate
                      └─ (accepted) the final model on every labelled query ─ verified export ─ bundle

1. :func:`~semdup.data.learn_folds.fold_supervision` cuts every labelled query into K folds (by time, author,
   source file or tag where the labels carry one that separates them, else by duplicate cluster; the rule is
   reported; a bundled set's test side is never among them).
2. The bundle to beat scores every labelled query: the operator's current bundle with its own fusion, or else the
   untrained default (the base encoder + IDF + a fusion fitted on the other folds, cross-fitted, so that neither
   side is judged on queries it was fitted on; the default shipped beside it is fitted on all of them).
3. :func:`~semdup.learn.out_of_fold.out_of_fold` trains one model per fold without it (the frozen bottom of the
   encoder computed once per post for all of them, :mod:`semdup.training.learn.frozen`); every query is scored
   by the model that never saw it, after the passes that were best on the other folds (each fold model scores its
   fold after every pass: :mod:`semdup.learn.pass_curve`). With a budget, the passes are what its minutes fit
   (:mod:`semdup.learn.pass_plan`).
4. Three candidates, from those out-of-fold scores: **the learned encoder alone** (its dense cosine), **the learned
   encoder inside the bundle to beat's own fusion** (``carried``: fold by fold, the fusion that bundle was
   cross-fitted with), and **the learned hybrid** (β_bow, α, β_title cross-fitted on the fold models' scores). A
   fusion fitted on fold models that learned from (K−1)/K of the links leans on BM25 and the bag of words more
   than the final model needs (on a held-out year of SemEval the encoder alone scored 1.3 MAP above the hybrid
   chosen at p = 0.042), so the encoder alone stays unless a fusion candidate beats it **clearly** out of fold:
   p < ``alpha`` and the 95 % interval of its gain above zero (the larger gain of two that do).
5. :func:`~semdup.learn.gate.gate`: the chosen candidate against the bundle to beat, query by query over every
   labelled query (a paired randomisation test): accepted only at p < ``alpha`` with the gain's 95 % interval
   above zero.
6. Only when the gate accepts: the final model is fine-tuned on every labelled query with the same recipe for the
   passes the fold models' curve found best (:mod:`semdup.learn.pass_curve`; each fold was judged at the passes
   best on the other folds), exported through the verified path
   (:func:`~semdup.export.onnx_export.export_checkpoint`: ONNX, parity with torch) and written as a bundle with
   the chosen fusion (a hybrid's fitted on all the out-of-fold scores). Its manifest records the folds, the
   per-fold and pooled figures, the choice and the gate (``learn``). Promoting it is the caller's step (``semdup
   upgrade``).

A budget (``budget_minutes``) stops training at a step, saved; the outcome then says where it stopped, the
decision the work done supports (on the queries of the folds finished), and about how long the rest takes; the
same call goes on. ``report`` hears a line per phase and every half minute of training.

Plain arguments only (no environment, no printing): the CLI reads the options and prints what this returns.

Example::

    sup = load_supervision("/data/site-dump")
    out = learn_bundle(sup, "artifacts/learn/candidate", base_bundle="artifacts/bundles/minilm",
                       work_dir="artifacts/learn/work", device="auto")
    out.decision.accept, out.decision.line(), out.chosen, out.phases
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from semdup.bundle.bundle import Bundle
from semdup.core.posts import Post
from semdup.data.learn_folds import FoldReport, LearnFolds, fold_supervision
from semdup.data.supervision import SourceReport, Supervision
from semdup.export.onnx_export import export_checkpoint
from semdup.learn.default_bundle import FitData, dev_groups, idf_pipeline, write_default_bundle
from semdup.learn.fusion_fit import GRID_TITLE, FusionFit, Group, choose_fusion, group_scores
from semdup.learn.gate import (
    DEFAULT_ALPHA,
    GateDecision,
    cross_fitted_figures,
    figures_from_predictions,
    gate,
    per_query_figures,
    ranked_figure,
)
from semdup.learn.out_of_fold import FoldRun, OutOfFold, fit_data, out_of_fold, side_data
from semdup.learn.pass_curve import DENSE_ONLY, PassChoice, PassPool
from semdup.learn.pass_plan import plan_passes, planned_passes
from semdup.measures.fitting import best_threshold
from semdup.measures.significance import PairedTest, paired_randomisation_test
from semdup.training.learn.encoder import base_encoder
from semdup.training.learn.frozen import FrozenPrefix
from semdup.training.learn.settings import LearnSettings, LearnSummary
from semdup.training.learn.trainer import Report, learn_encoder
from semdup.training.loop import resolve_device

__all__ = ["LearnOutcome", "Judgement", "Phases", "judge_learning", "learn_bundle", "DENSE_ONLY", "default_folds"]

logger = logging.getLogger(__name__)

_NO_FUSION = {"grid": ((0.0,), (0.0,)), "grid_title": (0.0,)}  # cross-fit only a pair threshold


def default_folds(device: str) -> int:
    """5 folds on a GPU (each fold model takes seconds); 2 on a CPU, where the out-of-fold figures of SemEval chose
    the same candidate and gate with 2 as with 5 (docs/results.md) and each fold model costs minutes."""
    return 5 if device == "cuda" else 2


@dataclass(frozen=True)
class LearnOutcome:
    """What :func:`learn_bundle` decided and wrote.

    Attributes:
        decision: the gate's (``accept`` = the candidate may replace the compared bundle).
        candidate_dir, version: the candidate bundle, written only when the gate accepts (else None).
        compared_with: the version of the bundle it was compared with (the current one, or the untrained default).
        default_dir: the untrained default written in the work folder (None when a current bundle was given).
        chosen: ``encoder`` (the learned encoder alone), ``carried`` (inside the fusion of the bundle to beat) or
            ``hybrid`` (inside a fusion fitted on the fold models' scores).
        choices: the paired test of each fusion candidate against the encoder alone (what chose between them).
        fusion: the candidate's fusion weights.
        figures: pooled out-of-fold figure per system: ``current``, ``encoder``, ``carried``, ``hybrid``,
            ``base_dense``.
        per_fold: the same figures per fold, with the fold's query count.
        folds: how the labels were cut.
        fold_runs: each fold model's training; final: the final model's (None when the gate refused).
        source: what the labels held.
        device: where it trained.
        phases: (wall, CPU) seconds per phase, in order.
        stopped: "" when the run is finished; else where the budget stopped it (``fold i of K``, or ``final model``:
            every step is saved and the same call goes on). Stopped in a fold, ``decision`` is the one the folds
            finished so far support (the learned encoder alone against the bundle to beat on their queries; None
            before any fold is finished); nothing is written either way.
        minutes_left: about how long the rest would take at the pace measured (0 when finished).
        passes: the passes curve out of fold, the passes each fold was judged at and the final model's
            (:mod:`semdup.learn.pass_curve`); None when the folds did not all finish.
    """

    decision: GateDecision | None
    candidate_dir: Path | None
    version: str | None
    compared_with: str
    default_dir: Path | None
    chosen: str
    choices: dict[str, PairedTest]
    fusion: dict[str, float]
    figures: dict[str, float]
    per_fold: list[dict[str, float]]
    folds: FoldReport
    fold_runs: list[FoldRun]
    final: LearnSummary | None
    source: SourceReport
    device: str
    phases: dict[str, tuple[float, float]] = field(default_factory=dict)
    stopped: str = ""
    minutes_left: float = 0.0
    passes: PassChoice | None = None

    def to_json(self) -> dict[str, Any]:
        return {"decision": None if self.decision is None else self.decision.to_json(),
                "passes": None if self.passes is None else self.passes.to_json(),
                "stopped": self.stopped, "minutes_left": round(self.minutes_left, 1),
                "candidate": None if self.candidate_dir is None
                else str(self.candidate_dir), "version": self.version, "compared_with": self.compared_with,
                "default": str(self.default_dir) if self.default_dir else None, "chosen": self.chosen,
                "choices": {k: t.to_json() for k, t in self.choices.items()}, "fusion": self.fusion,
                "figures": self.figures,
                "per_fold": self.per_fold, "folds": self.folds.to_json(),
                "fold_runs": [{"fold": r.index, "summary": r.summary.to_json(), "reused": r.reused,
                               "seconds": round(r.seconds, 1), "cpu_seconds": round(r.cpu_seconds, 1)}
                              for r in self.fold_runs],
                "final": None if self.final is None else self.final.to_json(), "source": self.source.to_json(),
                "device": self.device, "phases": {k: {"wall_s": w, "cpu_s": c} for k, (w, c) in self.phases.items()}}


class Phases:
    """Wall and CPU seconds per phase, in the order they ran."""

    def __init__(self) -> None:
        self.seconds: dict[str, tuple[float, float]] = {}
        self._wall, self._cpu = time.monotonic(), time.process_time()

    def end(self, name: str) -> None:
        wall, cpu = time.monotonic(), time.process_time()
        self.seconds[name] = (round(wall - self._wall, 1), round(cpu - self._cpu, 1))
        self._wall, self._cpu = wall, cpu


def _mean(figures: Mapping[str, float], keys: Sequence[str] | None = None) -> float:
    values = list(figures.values()) if keys is None else [figures[k] for k in keys if k in figures]
    return float(np.mean(values)) if values else float("nan")


def _fit(groups: Sequence[Group], data: FitData, grid_title: Sequence[float]) -> FusionFit:
    """The grid's best fusion on ``groups`` by the data's own measure (the mean per-query figure)."""
    return choose_fusion(groups, lambda preds: _mean(figures_from_predictions(preds, groups, data, None)),
                         "out-of-fold figure", grid_title=grid_title, per_query=ranked_figure(data))


def _threshold(groups: Sequence[Group], fusion: Mapping[str, float], data: FitData) -> float | None:
    """For pairs, the decision threshold that is best on ``groups`` under ``fusion``; None for ranked data."""
    if data.kind != "pairs":
        return None
    preds = group_scores(groups, fusion)
    return best_threshold([next(iter(preds[g.query_id].values())) for g in groups],
                          [data.dev[int(g.query_id)].duplicate for g in groups])[0]


def _current(current_bundle: str | Path, data: FitData) -> tuple[str, dict[str, float], dict[str, float]]:
    """(version, per-query figures, fusion) of the operator's bundle, scored with its own fusion and threshold."""
    bundle = Bundle.load(current_bundle)
    t = bundle.term_weights if bundle.term_weights is not None else np.zeros(len(bundle.pipeline.vocab), np.float32)
    groups, _, _ = dev_groups(bundle, bundle.pipeline, t, data, title=bool(bundle.fusion.get("beta_title")))
    return bundle.version, per_query_figures(groups, bundle.fusion, data, bundle.threshold), dict(bundle.fusion)


def _per_fold(folds: LearnFolds, systems: Mapping[str, Mapping[str, float]]) -> list[dict[str, float]]:
    return [{"fold": f.index, "queries": len(f.held_keys),
             **{name: round(_mean(fig, f.held_keys), 4) for name, fig in systems.items()}} for f in folds.folds]


@dataclass(frozen=True)
class Judgement:
    """Everything decided before the final model: the folds, the figures, the candidate and the gate.

    ``cut`` is the folds; ``pipeline``/``idf`` the candidate's bag of words; ``fit`` the candidate's fusion;
    ``threshold`` its pair threshold (None for ranked data); ``oof`` the fold models' scores (incomplete when the
    budget stopped a fold model: then ``decision`` is the one the finished folds support, or None); the rest as in
    :class:`LearnOutcome`."""

    cut: LearnFolds
    pipeline: Any
    idf: np.ndarray
    decision: GateDecision | None
    chosen: str
    choices: dict[str, PairedTest]
    fit: FusionFit
    threshold: float | None
    figures: dict[str, float]
    per_fold: list[dict[str, float]]
    compared_with: str
    default_dir: Path | None
    fold_runs: list[FoldRun]
    per_query: dict[str, dict[str, float]] = field(default_factory=dict, repr=False)
    oof: OutOfFold | None = field(default=None, repr=False)
    settings: LearnSettings | None = None  # the recipe the fold models trained with (a budget's passes planned)


def judge_learning(
    sup: Supervision,
    base_bundle: str | Path,
    work: Path,
    settings: LearnSettings,
    cut: LearnFolds,
    corpus: Sequence[Post] = (),
    current_bundle: str | Path | None = None,
    device: str = "cpu",
    threads: int = 2,
    deadline: float | None = None,
    alpha: float = DEFAULT_ALPHA,
    grid_title: Sequence[float] = GRID_TITLE,
    show_progress: bool = True,
    phases: Phases | None = None,
    prefix: FrozenPrefix | None = None,
    report: Report | None = None,
) -> Judgement:
    """Steps 2–5 of the module doc on folds already cut: the bundle to beat, the fold models, the candidate, the
    gate. (Research runs call it with folds of their own: ``experiments/learn_oof.py``.) ``prefix``: the frozen
    bottom's cache to share (None: one is made here when the recipe freezes layers)."""
    phases = phases or Phases()
    say = report or (lambda line: None)
    if prefix is None and settings.freeze_layers > 0:
        prefix = FrozenPrefix.for_settings(settings, device)
    work.mkdir(parents=True, exist_ok=True)
    posts = sup.posts() + list(corpus)
    labelled = fit_data(cut, cut.labelled, "labelled", posts)
    fold_of = {key: f.index for f in cut.folds for key in f.held_keys}
    base = Bundle.load(base_bundle)
    base_name = (base.manifest.get("base_encoder") or {}).get("name")
    if base_name and base_name != settings.base_encoder:
        raise ValueError(f"the base bundle holds {base_name!r} but the recipe fine-tunes {settings.base_encoder!r}; "
                         "give the base encoder's own bundle")
    pipeline, idf = idf_pipeline(base, posts)
    title = any(grid_title)
    phases.end("split")

    cache = work / "vectors"  # a dump's corpus is encoded once per encoder, whichever side asks
    base_groups, _, _ = dev_groups(base_encoder(base, settings, prefix, device), pipeline, idf, labelled,
                                   title=title, cache_dir=cache)
    default_dir = None
    if current_bundle is None:
        current, carried_folds = cross_fitted_figures(base_groups, labelled, fold_of, grid_title)
        default_fit = _fit(base_groups, labelled, grid_title)
        default_dir = work / "untrained-default"
        written = write_default_bundle(base_bundle, default_dir, pipeline, idf, default_fit, sup.report.source,
                                       _threshold(base_groups, default_fit.fusion, labelled))
        compared_with, carried = written.version, dict(default_fit.fusion)
    else:
        compared_with, current, carried = _current(current_bundle, labelled)
        carried_folds = {f.index: carried for f in cut.folds}
    base_dense, _ = cross_fitted_figures(base_groups, labelled, fold_of, **_NO_FUSION)
    phases.end("current")

    say(f"bundle to beat ({compared_with}) scored on {len(current)} labelled queries: {_mean(current):.2f}")
    base_by_key = {g.query_id: g for g in base_groups}
    pools = {f.index: PassPool.from_groups([base_by_key[k] for k in f.held_keys if k in base_by_key], labelled)
             for f in cut.folds}
    planned = planned_passes(settings, work, say)  # a run going on keeps the passes it planned, whatever budget
    if planned is not None:
        settings = planned
    elif deadline is not None:
        settings = plan_passes(settings, cut, pools, work, deadline, prefix, device, threads, say)
    oof = out_of_fold(cut, settings, pipeline, idf, work, posts, device=device, threads=threads, deadline=deadline,
                      title=title, show_progress=show_progress, prefix=prefix, report=report, pools=pools)
    phases.end("folds")
    if oof.passes is not None:
        say(oof.passes.line())
    if not oof.complete:
        return replace(_partial(cut, pipeline, idf, oof, labelled, current, alpha, compared_with, default_dir),
                       settings=settings)

    c = _decide(oof, labelled, current, carried_folds, carried, alpha, grid_title)
    systems = {"current": current, **c.per_query, "base_dense": base_dense}
    figures = {name: round(_mean(v), 4) for name, v in systems.items()}
    phases.end("gate")
    say(f"candidate: {c.chosen}; gate: {c.decision.line()}")
    return Judgement(cut, pipeline, idf, c.decision, c.chosen, c.choices, c.fit,
                     _threshold(oof.groups, c.fit.fusion, labelled), figures, _per_fold(cut, systems), compared_with,
                     default_dir, oof.runs, systems, oof, settings)


def _partial(cut: LearnFolds, pipeline: Any, idf: np.ndarray, oof: OutOfFold, labelled: FitData,
             current: dict[str, float], alpha: float, compared_with: str, default_dir: Path | None) -> Judgement:
    """The judgement the finished folds support when the budget stopped a fold model: the learned encoder alone
    (no fusion can be cross-fitted on one fold) against the bundle to beat on their queries, by the same gate; no
    decision before a fold is finished, nor for pairs (their threshold needs another fold)."""
    encoder: dict[str, float] = {}
    decision = None
    if oof.groups and labelled.kind != "pairs":
        encoder = per_query_figures(oof.groups, DENSE_ONLY, labelled)
        decision = gate({q: current[q] for q in encoder}, encoder,
                        metric="MAP" if labelled.kind != "pairs" else "accuracy", alpha=alpha)
    systems = {"current": {q: current[q] for q in encoder}, "encoder": encoder}
    figures = {name: round(_mean(v), 4) for name, v in systems.items()}
    fit = FusionFit(dict(DENSE_ONLY), figures["encoder"], "out-of-fold figure", [])
    return Judgement(cut, pipeline, idf, decision, "encoder", {}, fit, None, figures, [], compared_with, default_dir,
                     oof.runs, systems, oof)


def learn_bundle(
    sup: Supervision,
    out_dir: str | Path,
    base_bundle: str | Path,
    work_dir: str | Path,
    settings: LearnSettings | None = None,
    folds: int | None = None,
    exclude: Sequence[str] = (),
    corpus: Sequence[Post] = (),
    current_bundle: str | Path | None = None,
    device: str = "auto",
    threads: int = 2,
    budget_minutes: float | None = None,
    alpha: float = DEFAULT_ALPHA,
    grid_title: Sequence[float] = GRID_TITLE,
    show_progress: bool = True,
    report: Report | None = None,
) -> LearnOutcome:
    """Learn from ``sup``, decide, and write the candidate bundle to ``out_dir`` when the gate accepts (see the
    module doc).

    Args:
        sup: the site's labels (:func:`semdup.data.supervision.load_supervision`).
        out_dir: the candidate bundle's folder (replaced if it exists; written only on acceptance).
        base_bundle: the base encoder's bundle (``semdup export --base-encoder minilm``): what is fine-tuned is
            its encoder (``settings.base_encoder`` must name it), and the untrained default is built from it.
        work_dir: fold and final checkpoints (a rerun resumes there), the vector cache, the exported encoder and
            the untrained default.
        settings: the fine-tuning recipe (default :class:`LearnSettings`).
        folds: K; None = :func:`default_folds` for the device.
        exclude: post ids never to learn from or judge on (a bundled set's test side).
        corpus: posts to be indexed, added to the IDF vocabulary (no labels read).
        current_bundle: the bundle in service, to beat; None = the untrained default.
        device: ``auto``, ``cpu`` or ``cuda`` (:func:`semdup.training.loop.resolve_device`).
        threads: torch CPU threads.
        budget_minutes: wall-clock minutes for the whole call, None = no limit. Training stops when they run out
            (saved: the same call goes on from there) and the outcome says where (``stopped``), the decision the
            folds finished so far support, and about how long the rest would take.
        alpha: the significance level of the choice and the gate.
        grid_title: β_title values the hybrid may take (``(0.0,)``: no title term).
        show_progress: progress bars on a terminal.
        report: hears progress lines (each phase, and every half minute of training), terminal or not.

    Raises:
        ConfigError: ``cuda`` without a GPU. DataError: too few labels for the folds, or a leak between folds.
    """
    device = resolve_device(device)  # before anything loads: --device cuda without a GPU is refused at once
    deadline = None if budget_minutes is None else time.monotonic() + budget_minutes * 60.0
    phases = Phases()
    settings = settings or LearnSettings()
    work = Path(work_dir)
    say = report or (lambda line: None)
    cut = fold_supervision(sup, folds or default_folds(device), exclude)
    say(f"folds: {cut.report.line()}")
    prefix = FrozenPrefix.for_settings(settings, device) if settings.freeze_layers > 0 else None
    j = judge_learning(sup, base_bundle, work, settings, cut, corpus, current_bundle, device, threads, deadline,
                       alpha, grid_title, show_progress, phases, prefix, report)
    settings = j.settings or settings
    if j.oof is not None and j.oof.passes is not None:  # the final model trains the passes best out of fold
        settings = replace(settings, epochs=j.oof.passes.final)
    final_data = side_data(cut.kind, cut.labelled, settings)

    def outcome(candidate: Path | None = None, version: str | None = None, final: LearnSummary | None = None,
                stopped: str = "", steps_left: int = 0, per_step: float = 0.0) -> LearnOutcome:
        return LearnOutcome(j.decision, candidate, version, j.compared_with, j.default_dir, j.chosen, j.choices,
                            dict(j.fit.fusion), j.figures, j.per_fold, cut.report, j.fold_runs, final, sup.report,
                            device, phases.seconds, stopped, steps_left * per_step / 60.0,
                            None if j.oof is None else j.oof.passes)

    if j.oof is not None and not j.oof.complete:
        s = j.oof.stopped
        left = j.oof.steps_left + settings.planned_steps(len(final_data.groups))
        return outcome(stopped=f"fold {j.oof.stopped_fold + 1} of {cut.k}", steps_left=left,
                       per_step=s.seconds / max(s.steps, 1))
    if j.decision is None or not j.decision.accept:
        logger.info("learn: %s", "no decision" if j.decision is None else j.decision.line())
        return outcome()

    run = learn_encoder(settings, final_data, work / "final", deadline=deadline, threads=threads,
                        show_progress=show_progress, device=device, prefix=prefix,
                        extra_config={"data_set": sup.report.source, "folds": cut.report.to_json()},
                        report=None if report is None else (lambda line: report(f"final model: {line}")))
    if not run.finished:
        s = run.summary
        return outcome(final=s, stopped="final model", steps_left=s.planned_steps - s.steps,
                       per_step=s.seconds / max(s.steps, 1))
    phases.end("final")
    encoder = export_checkpoint(run.checkpoint_dir, work / "encoder")
    phases.end("export")
    record = {"settings": settings.to_json(), "folds": cut.report.to_json(), "chosen": j.chosen,
              "choices": {k: t.to_json() for k, t in j.choices.items()}, "gate": j.decision.to_json(),
              "compared_with": j.compared_with, "out_of_fold": j.figures, "per_fold": j.per_fold,
              "final": run.summary.record(), "fold_models": [r.summary.record() for r in j.fold_runs],
              "source": sup.report.to_json(), "candidate": True}
    bundle = write_default_bundle(encoder.bundle_dir, out_dir, j.pipeline, j.idf, j.fit, sup.report.source,
                                  j.threshold, extra={"learn": record})
    phases.end("write")
    logger.info("learn: %s; %s", run.summary.line(), j.decision.line())
    return outcome(Path(out_dir), bundle.version, run.summary)


@dataclass(frozen=True)
class _Choice:
    decision: GateDecision
    chosen: str
    choices: dict[str, PairedTest]
    fit: FusionFit
    per_query: dict[str, dict[str, float]]


def _paired(a: Mapping[str, float], b: Mapping[str, float]) -> PairedTest:
    common = [q for q in a if q in b]
    return paired_randomisation_test([a[q] for q in common], [b[q] for q in common])


def _decide(oof: OutOfFold, labelled: FitData, current: Mapping[str, float],
            carried_folds: Mapping[int, Mapping[str, float]], carried: Mapping[str, float], alpha: float,
            grid_title: Sequence[float]) -> _Choice:
    """The candidate, its fusion and the gate (step 4 of the module doc): the learned encoder alone unless a fusion
    candidate beats it clearly out of fold (p < ``alpha`` and its gain's 95 % interval above zero); of two that do,
    the larger gain (the carried fusion on a tie: nothing in it was fitted on the fold models)."""
    encoder, _ = cross_fitted_figures(oof.groups, labelled, oof.fold_of, **_NO_FUSION)
    per_query = {
        "encoder": encoder,
        "carried": cross_fitted_figures(oof.groups, labelled, oof.fold_of, fixed=carried_folds)[0],
        "hybrid": cross_fitted_figures(oof.groups, labelled, oof.fold_of, grid_title)[0],
    }
    choices = {name: _paired(encoder, per_query[name]) for name in ("carried", "hybrid")}
    clear = [n for n, t in choices.items() if t.p_value < alpha and t.mean_difference > 0 and t.ci_low > 0]
    chosen = max(clear, key=lambda n: (choices[n].mean_difference, n == "carried")) if clear else "encoder"
    decision = gate(current, per_query[chosen], metric="MAP" if labelled.kind != "pairs" else "accuracy",
                    alpha=alpha)
    if chosen == "hybrid":
        fit = _fit(oof.groups, labelled, grid_title)
    else:
        fusion = dict(carried) if chosen == "carried" else dict(DENSE_ONLY)
        fit = FusionFit(fusion, _mean(per_query[chosen]), "out-of-fold figure", [])
    logger.info("candidates out of fold: encoder alone %.2f, carried fusion %.2f (p = %.4f), hybrid %.2f (p = "
                "%.4f): %s", _mean(encoder), _mean(per_query["carried"]), choices["carried"].p_value,
                _mean(per_query["hybrid"]), choices["hybrid"].p_value, chosen)
    return _Choice(decision, chosen, choices, fit, per_query)
