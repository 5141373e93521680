"""Calibrated duplicate probability: Platt scaling on the fused score, stored beside the (content-hashed) bundle.

    P(duplicate | s) = 1 / (1 + exp(-(a·s + b)))

fitted by Newton's method on held-out pairs with Platt's smoothed targets (N₊+1)/(N₊+2) and 1/(N₋+2)
(Platt 1999, "Probabilistic outputs for support vector machines", §2.2). The bundle is content-hashed, so
the fit lives in a separate ``<bundle>.calibration.json`` next to it, keyed by the bundle version::

    {"t-scqa-c47dab540f62": {"a": 6.1, "b": -4.2, "threshold": 0.71, "fitted_on": "SemEval dev", "n": 500, ...}}

``threshold`` is the decision threshold on the fused score chosen on the same held-out pairs
(:func:`semdup.core.metrics.best_threshold`, maximum accuracy); it overrides the bundle's own. ``k``, when present,
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from semdup.core.errors import BundleError

__all__ = ["Calibration", "fit_platt", "calibration_path", "load_calibration", "save_calibration"]

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
    """Fit (a, b) by Newton's method with a backtracking line search (as Lin, Lin & Weng 2007 advise).

    Args:
        scores: fused scores of held-out pairs [N].
        labels: True for duplicates [N].

    Raises:
        ValueError: fewer than two pairs, or only one class.
    """
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    if s.shape != y.shape or s.ndim != 1 or s.size < 2:
        raise ValueError(f"need two flat arrays of one length (>= 2 pairs); found {s.shape} and {y.shape}")
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"Platt scaling needs both classes; found {n_pos} duplicates and {n_neg} non-duplicates")
    t = np.where(y, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))  # smoothed targets [N]

    def loss(a_: float, b_: float) -> float:
        z = a_ * s + b_
        return float(np.sum(np.logaddexp(0.0, z) - t * z))  # -log-likelihood of p = sigmoid(z)

    a, b = 0.0, float(np.log((n_pos + 1.0) / (n_neg + 1.0)))
    current = loss(a, b)
    for _ in range(max_iter):
        p = 1.0 / (1.0 + np.exp(-np.clip(a * s + b, -500, 500)))  # [N]
        g = p - t  # d loss / d z  [N]
        grad = np.array([np.sum(g * s), np.sum(g)])
        if np.max(np.abs(grad)) < 1e-9:
            break
        w = p * (1.0 - p)
        hess = np.array([[np.sum(w * s * s), np.sum(w * s)], [np.sum(w * s), np.sum(w)]]) + 1e-10 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        lr = 1.0
        while lr > 1e-10:
            na, nb = a - lr * step[0], b - lr * step[1]
            new = loss(na, nb)
            if new <= current - 1e-4 * lr * float(grad @ step):
                break
            lr /= 2.0
        if lr <= 1e-10:
            break
        a, b, current = na, nb, new
    return Calibration(a=float(a), b=float(b), n=int(s.size), positives=n_pos)


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
