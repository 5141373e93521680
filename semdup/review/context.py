"""What the review router needs, built once per process and kept in ``app.state.review``.

The router (:mod:`semdup.review.router`) holds no closure over an app factory: every endpoint asks for the
context with :func:`get_context`, so any FastAPI app that sets ``app.state.review`` and includes the router serves
the page (tests build one around the router alone; ``semdup serve`` through :func:`semdup.apps.http.create_app`).
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import HTTPException, Request
from jinja2 import Environment, PackageLoader, StrictUndefined

from semdup.alerts.store import FLAGS_INDEX
from semdup.core.text_pipeline import TextPipeline
from semdup.reranker.calibration import calibration_path, load_calibration
from semdup.review.metrics import ReviewStats
from semdup.review.render import display_pipeline, neutral
from semdup.review.sessions import SessionStore, key_id, owner_id
from semdup.review.verdicts import VERDICTS_INDEX
from semdup.service.auth_throttle import FailureThrottle
from semdup.service.settings import REVIEW, ApiKey, ServiceSettings

__all__ = ["ReviewContext", "review_context", "get_context"]

logger = logging.getLogger(__name__)


@dataclass
class ReviewContext:
    """Settings, cluster client, sessions, failure throttle, templates and text pipeline of the review page."""

    settings: ServiceSettings
    client: Any
    sessions: SessionStore
    throttle: FailureThrottle
    secret: str
    keys: dict[str, ApiKey]  # key_id -> review key
    templates: Environment
    pipeline: TextPipeline
    stats: ReviewStats
    model: str | None = None  # the bundle version the service runs (to read its calibration's threshold)
    flags_store: str = FLAGS_INDEX
    verdicts_store: str = VERDICTS_INDEX

    def __repr__(self) -> str:
        return f"ReviewContext(indices={self.settings.indices!r}, reviewers={len(self.keys)})"

    def key_of(self, kid: object) -> ApiKey | None:
        return self.keys.get(kid) if isinstance(kid, str) else None

    def threshold(self) -> float | None:
        """The decision threshold as the calibration file holds it now (``semdup calibrate`` rewrites it), else
        None; read on each page load (a small file), so the chart follows a new calibration at once."""
        if self.model is None:
            return None
        path = self.settings.calibration or calibration_path(self.settings.bundle)
        try:
            cal = load_calibration(Path(path), self.model)
        except Exception as exc:  # the page still shows the flags
            logger.warning("could not read the calibration %s (%s); the chart shows no threshold", path, exc)
            return None
        return None if cal is None else cal.threshold


def _templates() -> Environment:
    env = Environment(
        loader=PackageLoader("semdup.review", "templates"),
        autoescape=True,  # every template, whatever its name: posts are user HTML
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["neutral"] = neutral  # ids shown as text: no bidi control reorders them
    return env


def _own_sessions(client: Any, settings: ServiceSettings, secret: str) -> SessionStore:
    """This service's sessions: its lifetimes, its owner id (from the secret: replicas that share it share them)."""
    return SessionStore(client, settings.review.session_idle, settings.review.session_max_age, owner=owner_id(secret))


def review_context(
    settings: ServiceSettings,
    client: Any,
    model: str | None = None,
    *,
    flags_store: str = FLAGS_INDEX,
    verdicts_store: str = VERDICTS_INDEX,
    sessions: SessionStore | None = None,
    throttle: FailureThrottle | None = None,
) -> ReviewContext:
    """The context for ``settings`` (a random session secret when none is set: logins then last until the process
    stops, and hold in that process only, so ``semdup serve`` sets one for all its workers). ``sessions``: the
    store of logins (default: ``semdup-sessions`` through ``client``); ``throttle``: the failure counts the app's
    keyed endpoints share (default: this context's own, in memory)."""
    secret = settings.review.session_secret
    if secret is None:
        secret = secrets.token_urlsafe(32)
        if settings.review_enabled:
            logger.warning(
                "no SEMDUP_SESSION_SECRET: review logins last until this process stops and hold in it only; set "
                "SEMDUP_SESSION_SECRET (32+ characters) when running several workers or restarting"
            )
    keys = {key_id(secret, k.key): k for k in settings.api_keys if REVIEW in k.scopes}
    return ReviewContext(
        settings=settings,
        client=client,
        sessions=sessions or _own_sessions(client, settings, secret),
        throttle=throttle or FailureThrottle(
            None, limit=settings.auth_failures, window=settings.auth_window, block=settings.auth_block
        ),
        secret=secret,
        keys=keys,
        templates=_templates(),
        pipeline=display_pipeline(),
        stats=ReviewStats(client, settings.indices, settings.review.stats_ttl, flags_store, verdicts_store),
        model=model,
        flags_store=flags_store,
        verdicts_store=verdicts_store,
    )


def get_context(request: Request) -> ReviewContext:
    """The app's review context (a FastAPI dependency); 404 when the page is off."""
    ctx = getattr(request.app.state, "review", None)
    if ctx is None or not ctx.settings.review_enabled:
        raise HTTPException(
            404,
            "the review page is off: give a key the review scope in SEMDUP_API_KEYS (KEY:INDEX:review:NAME) with "
            "access control on",
        )
    return ctx
