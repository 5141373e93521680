"""Query-time reranking: candidates from OpenSearch templates (plus learned-sparse and k-NN), fused with the bundle.

The HTTP service is :mod:`semdup.service` (its routers, one per feature, and its settings), composed by the
composition root (:func:`semdup.apps.http.create_app`, what ``semdup serve`` runs); the reranker never imports it,
so using the :class:`Reranker` from Python does not import FastAPI.
"""

from __future__ import annotations

from semdup.core.errors import SearchTimeout
from semdup.reranker.calibration import Calibration, fit_platt, load_calibration, save_calibration
from semdup.reranker.reranker import Candidate, ModelMismatch, Reranker
from semdup.reranker.settings import RerankerSettings

__all__ = [
    "Calibration",
    "Candidate",
    "ModelMismatch",
    "Reranker",
    "RerankerSettings",
    "SearchTimeout",
    "fit_platt",
    "load_calibration",
    "save_calibration",
]
