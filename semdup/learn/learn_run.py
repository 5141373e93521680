"""What ``semdup learn`` runs: the labels found from what the operator names, then :func:`learn_bundle`.

Where the labels come from (``data``):

* ``semeval`` / ``travel`` / ``askubuntu``: a bundled set, every labelled query outside its test side
  (:mod:`semdup.data.learn_sets`: the test side is never read);
* a path: a Stack Exchange dump folder, SemEval XML / pairs JSONL, a JSONL of labelled pairs (what ``semdup
  verdicts`` exports) or of groups (:func:`semdup.data.supervision.load_supervision`), all of it;
* ``None`` with ``index`` and ``duplicate_field``: the links a field of the site's own index records
  (:func:`semdup.index_format.site_links.site_supervision`), read through the name given (an alias is followed).

The base encoder's bundle is ``artifacts/bundles/<encoder>`` unless given, exported there (torch) when absent, as
``semdup fit-default`` does. The work folder (checkpoints: a rerun resumes) defaults to ``<out>.work``.

Example::

    run = learn_from("semeval", "artifacts/learned/semeval", device="auto")
    run.outcome.decision.line(), run.kept
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from semdup.data.learn_sets import LEARN_SETS, NamedSupervision, named_supervision
from semdup.data.supervision import load_supervision
from semdup.learn.learned_bundle import LearnOutcome, learn_bundle
from semdup.training.learn.settings import LearnSettings
from semdup.training.loop import resolve_device

__all__ = ["LearnRun", "learn_from", "recipe", "work_dir_for", "PRESETS", "OUTCOME_FILE"]

logger = logging.getLogger(__name__)

# the recipe per base encoder: MiniLM's is LearnSettings' defaults (chosen out of fold on SemEval, docs/results.md);
# MPNet's is a cheaper CPU preset (shorter posts, more frozen layers, one epoch, its steps on the whole post), not
# yet measured to the end
PRESETS: dict[str, dict[str, Any]] = {
    "minilm": {},
    "mpnet": {"max_len": 128, "train_len": 0, "freeze_layers": 8, "epochs": 1.0},
}


OUTCOME_FILE = "learn-outcome.json"  # in the work folder: what the last run decided, candidate or not


@dataclass(frozen=True)
class LearnRun:
    """A finished ``semdup learn``: the outcome, the bundle kept in service, where the labels came from, time."""

    outcome: LearnOutcome
    kept: Path
    data: str
    base_bundle: Path
    current: Path | None
    wall_seconds: float
    cpu_seconds: float
    load: tuple[float, float] = field(default=(0.0, 0.0))  # 1-minute load average at the start and the end

    def to_json(self) -> dict[str, Any]:
        return {**self.outcome.to_json(), "kept": str(self.kept), "data": self.data, "wall_seconds": self.wall_seconds,
                "cpu_seconds_total": self.cpu_seconds, "load": list(self.load)}


def recipe(base_encoder: str = "minilm", **overrides: Any) -> LearnSettings:
    """The preset recipe of ``base_encoder`` with ``overrides`` (None values ignored)."""
    if base_encoder not in PRESETS:
        raise ValueError(f"unknown base encoder {base_encoder!r}; accepted: {', '.join(PRESETS)}")
    given = {k: v for k, v in overrides.items() if v is not None}
    return LearnSettings(base_encoder=base_encoder, **{**PRESETS[base_encoder], **given})


def work_dir_for(out_dir: str | Path) -> Path:
    """The default work folder of a candidate at ``out_dir``: ``<out>.work`` beside it."""
    p = Path(out_dir)
    return p.with_name(p.name + ".work")


def _labels(data: str | None, client: Any, index: str | None, duplicate_field: str | None, title_field: str,
            body_field: str) -> tuple[NamedSupervision, str]:
    if data is None:
        if not (index and duplicate_field and client is not None):
            raise ValueError("no labels: give data (a bundled set's name or a path) or an index and its duplicate "
                             "field")
        from semdup.index_format.site_links import site_supervision

        sup = site_supervision(client, index, duplicate_field, title_field, body_field)
        return NamedSupervision(sup), f"index {index} ({duplicate_field})"
    if data in LEARN_SETS:
        return named_supervision(data), data
    return NamedSupervision(load_supervision(data)), data


def learn_from(
    data: str | None,
    out_dir: str | Path,
    *,
    budget_minutes: float | None = None,
    settings: LearnSettings | None = None,
    folds: int | None = None,
    device: str = "auto",
    base_bundle: str | Path | None = None,
    current_bundle: str | Path | None = None,
    work_dir: str | Path | None = None,
    client: Any = None,
    index: str | None = None,
    duplicate_field: str | None = None,
    title_field: str = "title",
    body_field: str = "body",
    threads: int = 2,
    show_progress: bool = True,
    report: Callable[[str], None] | None = None,
) -> LearnRun:
    """Find the labels (see the module doc), learn (:func:`~semdup.learn.learned_bundle.learn_bundle`), and
    return what was written and which bundle is kept. A run the budget stops returns too: its outcome says where
    it stopped and the decision it could make (the same call goes on). ``report`` hears progress lines.

    Raises:
        DataError: unreadable or too few labels. SearchIndexError / OpenSearchUnavailable: reading the site's index.
        ConfigError: ``--device cuda`` without a GPU.
        ValueError: contradictory arguments.
    """
    device = resolve_device(device)  # --device cuda without a GPU: refused before anything loads
    t0, c0 = time.monotonic(), time.process_time()
    load0 = os.getloadavg()[0]
    settings = settings or recipe()
    named, name = _labels(data, client, index, duplicate_field, title_field, body_field)
    base = Path(base_bundle) if base_bundle is not None else Path("artifacts/bundles") / settings.base_encoder
    if not (base / "manifest.json").exists() and not base.is_file():
        from semdup.export.base_encoder_bundle import export_base_encoder

        logger.info("exporting the base encoder %s to %s", settings.base_encoder, base)
        export_base_encoder(settings.base_encoder, base)
    work = Path(work_dir) if work_dir is not None else work_dir_for(out_dir)
    outcome = learn_bundle(named.supervision, out_dir, base, work, settings=settings, folds=folds,
                           exclude=sorted(named.exclude), corpus=named.corpus, current_bundle=current_bundle,
                           device=device, threads=threads, budget_minutes=budget_minutes, show_progress=show_progress,
                           report=report)
    if outcome.candidate_dir is not None:
        kept = outcome.candidate_dir
    else:
        kept = Path(current_bundle) if current_bundle is not None else outcome.default_dir or base
    run = LearnRun(outcome, kept, name, base, None if current_bundle is None else Path(current_bundle),
                   time.monotonic() - t0, time.process_time() - c0, (load0, os.getloadavg()[0]))
    (work / OUTCOME_FILE).write_text(json.dumps(run.to_json(), indent=2), encoding="utf-8")
    return run
