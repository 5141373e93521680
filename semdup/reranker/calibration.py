"""Calibrated duplicate probability: Platt scaling on the fused score, stored beside the (content-hashed) bundle.

    P(duplicate | s) = 1 / (1 + exp(-(a·s + b)))

fitted by Newton's method on held-out pairs with Platt's smoothed targets (N₊+1)/(N₊+2) and 1/(N₋+2)
(Platt 1999, "Probabilistic outputs for support vector machines", §2.2); the maths is
:func:`semdup.measures.fitting.platt_scaling`, the project's one fitting module. The bundle is content-hashed, so
the fit lives in a separate ``<bundle>.calibration.json`` next to it, keyed by the bundle version::

    {"t-scqa-c47dab540f62": {"a": 6.1, "b": -4.2, "threshold": 0.71, "fitted_on": "SemEval dev", "n": 500, ...}}

``threshold`` is the decision threshold on the fused score chosen on the same held-out pairs
(:func:`semdup.measures.fitting.best_threshold`, maximum accuracy or F1; :func:`fit_decision` fits both); it overrides
the bundle's own. ``k``, when present,
is how many candidates per post the threshold was chosen for (:func:`semdup.alerts.choice.fit_flagging`): the
flagging workers take it unless ``SEMDUP_FLAG_K`` is set.

Example::

    >>> cal = fit_platt(np.array([0.1, 0.2, 0.8, 0.9]), np.array([False, False, True, True]))
    >>> bool(cal.probability(np.array([0.95]))[0] > 0.5)
    True
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from semdup.core.errors import BundleError
from semdup.measures.fitting import best_threshold, platt_scaling

__all__ = ["Calibration", "fit_platt", "fit_decision", "calibration_path", "load_calibration", "save_calibration"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Calibration:
    """Platt parameters (a, b), the decision threshold on the fused score, and where they were fitted."""

    a: float
    b: float
    threshold: float | None = None
    fitted_on: str = ""
    n: int = 0
    positives: int = 0
    dev_accuracy: float | None = None
    k: int | None = None  # flags per post the threshold was chosen with (None: not recorded; workers use 10)

    def __post_init__(self) -> None:
        if self.k is not None and (isinstance(self.k, bool) or not isinstance(self.k, int) or not 1 <= self.k <= 100):
            raise ValueError(f"k must be a whole number within 1..100 or absent, found {self.k!r}")

    def probability(self, scores: np.ndarray) -> np.ndarray:
        """P(duplicate) for fused scores [N]."""
        z = self.a * np.asarray(scores, dtype=np.float64) + self.b
        return 1.0 / (1.0 + np.exp(-np.clip(z, -500, 500)))

    def get_config_dict(self) -> dict[str, Any]:
        return asdict(self)


def fit_platt(scores: Sequence[float], labels: Sequence[bool], max_iter: int = 100) -> Calibration:
    """Platt's (a, b) on held-out pairs (:func:`semdup.measures.fitting.platt_scaling`), with no threshold yet.

    Args:
        scores: fused scores of held-out pairs [N].
        labels: True for duplicates [N].

    Raises:
        ValueError: fewer than two pairs, or only one class.
    """
    a, b = platt_scaling(scores, labels, max_iter)
    return Calibration(a=a, b=b, n=len(scores), positives=int(np.sum(np.asarray(labels, dtype=bool))))


def fit_decision(
    scores: Sequence[float], labels: Sequence[bool], fitted_on: str, measure: str = "accuracy", floor: bool = False
) -> Calibration:
    """The threshold that maximises ``measure`` on these held-out pairs
    (:func:`semdup.measures.fitting.best_threshold`) and Platt's (a, b) on the same pairs, as one :class:`Calibration`.

    ``floor``: keep the threshold at or above the lowest score (a site's verdicts exist only for flagged pairs, so
    nothing says how far below them the next duplicates lie); ``dev_accuracy`` stays the accuracy at the chosen one.

    Raises:
        ValueError: an unknown measure, fewer than two pairs, or only one class.
    """
    threshold, accuracy = best_threshold(scores, labels, measure)
    if floor and threshold < min(scores):
        logger.info("threshold %.4f is below every judged score; kept at the lowest, %.4f", threshold, min(scores))
        threshold = min(scores)
    platt = fit_platt(scores, labels)
    return replace(platt, threshold=float(threshold), fitted_on=fitted_on, dev_accuracy=float(accuracy))


def calibration_path(bundle_path: str | Path) -> Path:
    """``artifacts/bundles/x`` and ``artifacts/bundles/x.tar.gz`` → ``artifacts/bundles/x.calibration.json``."""
    p = Path(bundle_path)
    name = p.name[: -len(".tar.gz")] if p.name.endswith(".tar.gz") else p.name
    return p.with_name(f"{name}.calibration.json")


def load_calibration(path: str | Path, version: str) -> Calibration | None:
    """The calibration for bundle ``version`` in ``path``; None when the file or the version's entry is absent.

    Raises:
        BundleError: the file is not a JSON object of version → parameters.
    """
    p = Path(path)
    if not p.is_file():
        return None
    try:
        table = json.loads(p.read_text(encoding="utf-8"))
        entry = table.get(version)
        if entry is None:
            logger.warning(
                "%s has no calibration for bundle %s (it holds %s); fit one with `semdup eval decisions --fit`",
                p,
                version,
                sorted(table),
            )
            return None
        return Calibration(**entry)
    except (ValueError, TypeError, AttributeError) as exc:
        raise BundleError(
            f"{p} is not a calibration file (JSON object: bundle version -> a, b, threshold …): "
            f"{exc}; delete it and fit again"
        ) from exc


def save_calibration(path: str | Path, version: str, calibration: Calibration) -> Path:
    """Add or replace the entry for ``version`` (other versions' entries are kept); atomic replace."""
    p = Path(path)
    table: dict[str, Any] = {}
    if p.is_file():
        try:
            table = json.loads(p.read_text(encoding="utf-8"))
        except ValueError:
            logger.warning("%s was not valid JSON; it is replaced by a new calibration file", p)
            table = {}
    table[version] = calibration.get_config_dict()
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(table, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, p)
    logger.info("calibration for %s written to %s", version, p)
    return p
