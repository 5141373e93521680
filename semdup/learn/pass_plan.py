"""How many passes a run with a budget can afford: measured here, before the fold models train.

Without a budget a run tries the recipe's ``epochs``. With one (``semdup learn --budget 15m``), the passes are
what the minutes left fit, up to ``max_epochs``: one training step of the recipe is timed on a throwaway model, the
untrained encoder's vectors are timed on a sample of the pools' posts to price a point of the passes curve
(:mod:`semdup.learn.pass_curve`), and every model still to train (the K fold models and the final one, whose side
holds every labelled query) is given the same passes over its own side. What is kept free: a tenth of the minutes,
the fold models' scoring after training (the posts their curve's points did not encode, at the sampled cost a
post), and a minute for the gate, the export and the writing.

The plan is written to the work folder and reused by the same call later (a budget-stopped run resumes the same
recipe: its fold models' states name it).

Example::

    settings = plan_passes(settings, cut, pools, work, deadline, prefix, "cpu", 2, print)
    settings.epochs   # e.g. 2.75 on a 2,546-link site with 15 minutes
"""

from __future__ import annotations

import json
import logging
import random
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

__all__ = ["plan_passes", "planned_passes", "post_seconds", "PLAN_FILE", "AFTER_TRAINING_S", "SAMPLE"]

logger = logging.getLogger(__name__)

PLAN_FILE = "passes-plan.json"
AFTER_TRAINING_S = 60.0  # the gate, the export and the bundle's writing, besides the folds' scoring
SAMPLE = 256  # posts a curve point's cost is timed on


def plan_passes(settings: LearnSettings, cut: LearnFolds, pools: Mapping[int, PassPool], work: Path,
                deadline: float, prefix: FrozenPrefix | None, device: str, threads: int,
                say: Callable[[str], None]) -> LearnSettings:
    """``settings`` with ``epochs`` = the passes the minutes to ``deadline`` fit (see the module doc), written to
    ``work`` for :func:`planned_passes` to find when the same run goes on."""
    path = work / PLAN_FILE
    datas = [side_data(cut.kind, f.train, settings) for f in cut.folds]
    final = side_data(cut.kind, cut.labelled, settings)
    step = step_seconds(settings, datas[0], prefix, device, threads)
    per_post = post_seconds(settings, pools, prefix, device)
    point = per_post * sum(p.posts() for p in pools.values())
    scoring = per_post * sum(max(0, p.scored_posts() - p.posts()) for p in pools.values())
    untrained = next(iter(pools.values())).base_figures()  # the base encoder's cosines: the untrained point
    steps = sum(settings.steps_per_epoch(len(d.groups)) for d in datas) + settings.steps_per_epoch(len(final.groups))
    left = deadline - time.monotonic()
    usable = 0.9 * left - scoring - AFTER_TRAINING_S
    epochs = passes_within(usable, step, steps, point, most=settings.max_epochs)
    path.parent.mkdir(parents=True, exist_ok=True)
    base = round(float(np.mean(list(untrained.values()))), 4) if untrained else None
    plan = {"recipe": _recipe(settings), "epochs": epochs, "step_s": round(step, 3), "point_s": round(point, 1),
            "scoring_s": round(scoring, 1), "steps_per_pass": steps, "minutes_left": round(left / 60, 1),
            "untrained_fold_1": base}
    path.write_text(json.dumps(plan, indent=2), encoding="utf-8")
    say(f"passes: {epochs:g} (at most {settings.max_epochs:g}): a step takes {step:.2f} s, a pass {steps} steps over "
        f"the {cut.k} fold models and the final one, a curve point {point:.0f} s, the scoring after training "
        f"{scoring:.0f} s; {left / 60:.1f} min left")
    return replace(settings, epochs=epochs)


def post_seconds(settings: LearnSettings, pools: Mapping[int, PassPool], prefix: FrozenPrefix | None, device: str,
                 sample: int = SAMPLE) -> float:
    """What a fold model's vector of one post costs: the untrained encoder's vectors of ``sample`` posts drawn
    from the pools, timed (a whole point over a big site's pools is most of its corpus: minutes). Without
    gradients: the trainable layers' autograd graph over a big site's pool held 24 GB and the machine killed the
    run."""
    posts = [p for pool in pools.values() for p in pool.all_posts()]
    if not posts:
        return 0.0
    drawn = random.Random(0).sample(posts, min(sample, len(posts)))
    vectors = PostVectors(build_model(settings).to(device).eval(), prefix, chunk_size=64)
    with torch.no_grad():
        t0 = time.monotonic()
        vectors(drawn)
        seconds = time.monotonic() - t0
    return seconds / len(drawn)


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
