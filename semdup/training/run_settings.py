"""What a training run uses: the arch's defaults, then the dev-chosen defaults of (arch, data set), then the caller's.

The library API under ``semdup train``::

    run = resolve_settings("bow-cnn", "travel", overrides={"epochs": 4, "lr": None}, hparams={"conv_units": 200})
    recipe = run.build_recipe(DataPaths.defaults("travel"))
    train(run.settings, recipe.data, recipe.evaluate_dev, recipe.dev_metric, out_dir, recipe.evaluate_final)

Three layers, each overriding the one before: ``ArchSpec.train_defaults`` (the arch), ``RECIPE_DEFAULTS`` (what
dev chose for this arch on this data set, :mod:`semdup.training.recipes`), and ``overrides`` (the command line;
``None`` means "not given"). Model hyper-parameters merge the same way: the recipe's ``hparams``, then the caller's.
Three settings belong to the recipe (how its training pairs are drawn), not to :class:`TrainSettings`:
``lexical_negatives``, ``related_negatives`` and ``random_pair_negatives``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from semdup.training.recipes import DataPaths, Recipe, build_recipe, recipe_defaults
from semdup.training.trainer import TrainSettings

__all__ = ["ResolvedRun", "resolve_settings", "parse_set", "RECIPE_OPTIONS"]

logger = logging.getLogger(__name__)

# The recipe's own settings and their values when neither dev nor the caller chose one.
RECIPE_OPTIONS: dict[str, Any] = {"lexical_negatives": 30, "related_negatives": True, "random_pair_negatives": 0}


def parse_set(values: Iterable[str]) -> dict[str, Any]:
    """``key=value`` pairs (``--set``'s hyper-parameters); values read as JSON when they parse (numbers,
    true/false), else strings.

    Raises:
        ValueError: an item without ``=`` (the CLI reports it as a bad ``--set``).
    """
    out: dict[str, Any] = {}
    for item in values:
        if "=" not in item:
            raise ValueError(f"expected key=value, got {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = json.loads(v)
        except ValueError:
            out[k.strip()] = v
    return out


@dataclass(frozen=True)
class ResolvedRun:
    """The settings of one run: the trainer's, the recipe's, and which of them dev chose (for the log).

    Args:
        data: the data set (``semeval``, ``travel``, ``askubuntu``).
        settings: the trainer's settings.
        lexical_negatives: Travel: BM25 top-k non-duplicates used as hard negatives (0 = none).
        related_negatives: Travel: related links (LinkTypeId=1) as negatives.
        random_pair_negatives: Travel, pair losses: random 0-pairs per positive beside the hard ones.
        dev_chosen: the trainer settings the dev-chosen defaults supplied (before the caller's overrides).
    """

    data: str
    settings: TrainSettings
    lexical_negatives: int = 30
    related_negatives: bool = True
    random_pair_negatives: int = 0
    dev_chosen: Mapping[str, Any] = field(default_factory=dict)

    def build_recipe(self, paths: DataPaths, *, qa_pairs: bool = False, report_test: bool = True) -> Recipe:
        """This run's recipe over ``paths``; ``report_test=False`` for tuning runs (dev only)."""
        return build_recipe(
            self.data,
            paths,
            negatives=self.settings.negatives,
            seed=self.settings.seed,
            lexical_negatives=self.lexical_negatives,
            qa_pairs=qa_pairs,
            report_test=report_test,
            related_negatives=self.related_negatives,
            random_pair_negatives=self.random_pair_negatives,
        )


def resolve_settings(
    arch: str,
    data: str,
    overrides: Mapping[str, Any] | None = None,
    hparams: Mapping[str, Any] | None = None,
) -> ResolvedRun:
    """The run's settings for ``arch`` on ``data``.

    Args:
        arch: a registered architecture name.
        data: the data set whose dev-chosen defaults apply.
        overrides: :class:`TrainSettings` fields and :data:`RECIPE_OPTIONS` keys; ``None`` values are ignored.
        hparams: model hyper-parameters over the recipe's (``--set key=value``).

    Raises:
        ConfigError: an unknown architecture or setting, or a value :class:`TrainSettings` refuses.
    """
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    chosen = recipe_defaults(arch, data)
    merged_hparams = {**chosen.pop("hparams"), **(hparams or {})}
    recipe = {k: given.pop(k, chosen.pop(k, default)) for k, default in RECIPE_OPTIONS.items()}
    settings = TrainSettings.for_arch(arch, **{**chosen, **given}, hparams=merged_hparams)
    if chosen:
        logger.info(
            "dev-chosen defaults for %s on %s: %s (options given on the command line win)", arch, data, chosen
        )
    return ResolvedRun(data=data, settings=settings, dev_chosen=chosen, **recipe)
