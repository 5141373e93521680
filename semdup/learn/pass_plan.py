"""How many passes a run with a budget can afford: measured here, before the fold models train.

Without a budget a run tries the recipe's ``epochs``. With one (``semdup learn --budget 15m``), the passes are
what the minutes left fit, up to ``max_epochs``: one training step of the recipe is timed on a throwaway model, one
point of the passes curve (:mod:`semdup.learn.pass_curve`) is timed with the untrained encoder (that point is the
curve's 0), and every model still to train (the K fold models and the final one, whose side holds every labelled
query) is given the same passes over its own side. What is kept free: a tenth of the minutes, and the scoring,
gate, export and writing after training, estimated as the bundle to beat's scoring took.

The plan is written to the work folder and reused by the same call later (a budget-stopped run resumes the same
recipe: its fold models' states name it).

Example::

    settings = plan_passes(settings, cut, pools, work, deadline, phases, prefix, "cpu", 2, print)
    settings.epochs   # e.g. 2.75 on a 2,546-link site with 15 minutes
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from semdup.data.learn_folds import LearnFolds
from semdup.learn.out_of_fold import side_data
from semdup.learn.pass_curve import PassPool, passes_within
from semdup.training.learn.frozen import FrozenPrefix, PostVectors, build_model
from semdup.training.learn.settings import LearnSettings
from semdup.training.learn.trainer import step_seconds

__all__ = ["plan_passes", "planned_passes", "untrained_point", "PLAN_FILE", "AFTER_TRAINING_S"]

logger = logging.getLogger(__name__)

PLAN_FILE = "passes-plan.json"
AFTER_TRAINING_S = 60.0  # the gate, the export and the bundle's writing, besides the folds' scoring


def plan_passes(settings: LearnSettings, cut: LearnFolds, pools: Mapping[int, PassPool], work: Path,
                deadline: float, phases: Any, prefix: FrozenPrefix | None, device: str, threads: int,
                say: Callable[[str], None]) -> LearnSettings:
    """``settings`` with ``epochs`` = the passes the minutes to ``deadline`` fit (see the module doc), written to
    ``work`` for :func:`planned_passes` to find when the same run goes on."""
    path = work / PLAN_FILE
    datas = [side_data(cut.kind, f.train, settings) for f in cut.folds]
    final = side_data(cut.kind, cut.labelled, settings)
    step = step_seconds(settings, datas[0], prefix, device, threads)
    t0 = time.monotonic()
    first = next(iter(pools.values()))
    untrained = untrained_point(settings, first, prefix, device)
    point = (time.monotonic() - t0) * sum(p.posts() for p in pools.values()) / max(first.posts(), 1)
    steps = sum(settings.steps_per_epoch(len(d.groups)) for d in datas) + settings.steps_per_epoch(len(final.groups))
    scoring = float(phases.seconds.get("current", (0.0, 0.0))[0])
    left = deadline - time.monotonic()
    usable = 0.9 * left - scoring - AFTER_TRAINING_S
    epochs = passes_within(usable, step, steps, point, most=settings.max_epochs)
    path.parent.mkdir(parents=True, exist_ok=True)
    base = round(float(np.mean(list(untrained.values()))), 4) if untrained else None
    plan = {"recipe": _recipe(settings), "epochs": epochs, "step_s": round(step, 3), "point_s": round(point, 1),
            "steps_per_pass": steps, "minutes_left": round(left / 60, 1), "untrained_fold_1": base}
    path.write_text(json.dumps(plan, indent=2), encoding="utf-8")
    say(f"passes: {epochs:g} (at most {settings.max_epochs:g}): a step takes {step:.2f} s, a pass {steps} steps over "
        f"the {cut.k} fold models and the final one, a curve point {point:.0f} s; {left / 60:.1f} min left")
    return replace(settings, epochs=epochs)


def untrained_point(settings: LearnSettings, pool: PassPool, prefix: FrozenPrefix | None, device: str
                    ) -> dict[str, float]:
    """The curve's point of the untrained encoder on ``pool``, without gradients: the trainable layers' autograd
    graph over every post of a big site's pool held 24 GB and the machine killed the run."""
    vectors = PostVectors(build_model(settings).to(device).eval(), prefix, chunk_size=64)
    with torch.no_grad():
        return pool.score(lambda ps: vectors(ps).cpu().numpy())


def planned_passes(settings: LearnSettings, work: Path, say: Callable[[str], None]) -> LearnSettings | None:
    """The recipe a budgeted run planned in ``work`` (None: none planned there, or for another recipe). A run
    resumed with another budget, or none, goes on with it: its fold models' states name those passes."""
    path = work / PLAN_FILE
    if not path.exists():
        return None
    plan = json.loads(path.read_text(encoding="utf-8"))
    if plan.get("recipe") != _recipe(settings):
        return None
    say(f"passes: {plan['epochs']:g}, as planned when this run started ({path})")
    return replace(settings, epochs=float(plan["epochs"]))


def _recipe(settings: LearnSettings) -> dict[str, Any]:
    """What a plan is for: the recipe without the passes it plans."""
    return {k: v for k, v in settings.to_json().items() if k != "epochs"}
