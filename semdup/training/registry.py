"""The table of trainable architectures: name → model class, input kind, defaults, loss.

Each model module registers itself at import time::

    register(ArchSpec(name="bow-cnn", model_class=BowCNN, input_kind="text_ids",
                      defaults={"emb_dim": 50, ...}, loss_class=BowCNNLogisticLoss,
                      loss_defaults={"gamma": 10.0}, batch_format="groups"))

:func:`get_arch` imports the known model modules lazily, so ``semdup --help`` and the torch-free
parts never import torch through this module. See ``semdup/training/README.md`` for the model
and loss interface an architecture must meet.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from semdup.core.errors import ConfigError

__all__ = ["ArchSpec", "ARCHITECTURES", "MODEL_MODULES", "BATCH_FORMATS", "register", "get_arch", "arch_names"]

logger = logging.getLogger(__name__)

# Batch formats a loss can ask the trainer for:
#   "groups": scores [B, 1 + K] — column 0 the positive candidate, then K negatives of the same query;
#   "pairs":  scores [B] with float labels [B] (1 duplicate / 0 not).
BATCH_FORMATS = ("groups", "pairs")

# Architecture name -> module that registers it (imported on first use).
MODEL_MODULES: dict[str, str] = {
    "bow-cnn": "semdup.training.models.bow_cnn",
    "cnn": "semdup.training.models.cnn",
    "scqa": "semdup.training.models.scqa",
    "t-scqa": "semdup.training.models.scqa",
    "rcnn": "semdup.training.models.rcnn",
    "minilm": "semdup.training.models.minilm",
    "bow-minilm": "semdup.training.models.bow_minilm",
}


@dataclass(frozen=True)
class ArchSpec:
    """What the trainer, checkpoints and export need to know about one architecture.

    Args:
        name: the ``--arch`` name.
        model_class: an ``nn.Module`` subclass meeting the README's model interface
            (``from_hparams``, ``encode``, ``score``, ``dense_encoder``, ``term_weights``, ``fusion``,
            ``get_config_dict``).
        input_kind: a name in :data:`semdup.core.inputs.INPUT_KINDS`.
        defaults: hyper-parameters of the model (CLI flags and ``--set key=value`` override them).
        loss_class: an ``nn.Module`` whose ``forward(scores, labels=None)`` returns the loss.
        loss_defaults: keyword arguments of ``loss_class``.
        batch_format: ``"groups"`` or ``"pairs"`` (see :data:`BATCH_FORMATS`).
        train_defaults: trainer settings for this arch (lr, optimizer, batch_size, epochs, negatives ...).
        pipeline_defaults: :class:`TextPipelineSettings` fields this arch needs (e.g. trigram buckets).
        description: one line for ``--help``.
    """

    name: str
    model_class: type
    input_kind: str
    defaults: Mapping[str, Any]
    loss_class: type
    loss_defaults: Mapping[str, Any] = field(default_factory=dict)
    batch_format: str = "groups"
    train_defaults: Mapping[str, Any] = field(default_factory=dict)
    pipeline_defaults: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        if self.batch_format not in BATCH_FORMATS:
            raise ValueError(f"batch_format {self.batch_format!r} is not one of {BATCH_FORMATS}")


ARCHITECTURES: dict[str, ArchSpec] = {}


def register(spec: ArchSpec) -> ArchSpec:
    """Add (or replace) an architecture; called by each model module at import time."""
    if spec.name in ARCHITECTURES and ARCHITECTURES[spec.name].model_class is not spec.model_class:
        logger.info("architecture %s re-registered with %s", spec.name, spec.model_class.__name__)
    ARCHITECTURES[spec.name] = spec
    return spec


def arch_names() -> list[str]:
    """Every architecture name semdup knows (registered or importable)."""
    return sorted(set(MODEL_MODULES) | set(ARCHITECTURES))


def get_arch(name: str) -> ArchSpec:
    """The spec for ``name``, importing its model module if needed.

    Raises:
        ConfigError: unknown name, or its module is not part of this installation.
    """
    if name not in ARCHITECTURES and name in MODEL_MODULES:
        try:
            importlib.import_module(MODEL_MODULES[name])
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("semdup."):
                raise ConfigError(f"architecture {name!r} is not built in this version (no {exc.name})") from exc
            raise ConfigError(
                f"architecture {name!r} needs the training extras ({exc.name} is missing); "
                'install them with: pip install "semdup[train]"'
            ) from exc
    try:
        return ARCHITECTURES[name]
    except KeyError:
        raise ConfigError(f"unknown architecture {name!r}; known: {arch_names()}") from None
