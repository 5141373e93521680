"""``semdup serve`` composed: the settings tree resolved once, what the uvicorn workers share, then the workers.

The CLI parses the options into settings overrides and calls :func:`serve`; everything a supervisor prepares for
its workers happens here, in the composition root: the tree resolved and checked before any worker starts (a short
key or a bad bundle is one Error line), one review session secret for every worker (a login holds in all of them),
a runtime folder for the state they share (the failure counts), and the resolved tree handed to the spawned
workers as one environment variable (:data:`~semdup.apps.variables.HANDOFF_ENV`)::

    serve({"model.bundle": "artifacts/bundles/t-scqa-semeval", "service.index": "questions"},
          host="127.0.0.1", port=8080, announce=print)
"""

from __future__ import annotations

import logging
import os
import secrets
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

from semdup.apps.settings import Settings

__all__ = ["serve", "share_between_workers"]

logger = logging.getLogger(__name__)


def share_between_workers(
    tree: Settings, *, review: bool
) -> tuple[Settings, tempfile.TemporaryDirectory[str] | None, str]:
    """What every worker of one ``semdup serve`` must hold alike, filled in where the settings leave it unset
    (``review``: whether the service's review page is on).

    Returns:
        The tree with a review session secret (only when the review page is on and none is set: one random secret
        for every worker, so a review login holds in all of them until the service stops) and a runtime folder
        (when ``service.runtime_dir`` is unset); the temporary folder made for it (``None`` when the settings name
        one), which the caller removes once the workers have stopped; and a note for the announcement line
        (empty, or what a random secret means for logins).
    """
    note = ""
    if review and not tree.review.session_secret:
        # one secret for every worker, so a review login holds in all of them (until this service stops)
        tree = tree.model_copy(
            update={"review": tree.review.model_copy(update={"session_secret": secrets.token_urlsafe(32)})}
        )
        note = " (logins last until the service stops: set SEMDUP_SESSION_SECRET to keep them)"
    runtime = None
    if tree.service.runtime_dir is None:  # what the workers share (the failure counts): a folder of this service's
        runtime = tempfile.TemporaryDirectory(prefix="semdup-serve-")
        tree = tree.model_copy(update={"service": tree.service.model_copy(update={"runtime_dir": runtime.name})})
    return tree, runtime, note


def serve(
    overrides: Mapping[str, Any],
    *,
    host: str,
    port: int,
    log_json: bool = False,
    announce: Callable[[str], None] = print,
) -> None:
    """Run the reranking HTTP service until it stops: resolve and check the settings, load the bundle once, prepare
    what the workers share, announce, run the workers.

    Args:
        overrides: the command line's settings (dotted paths of the settings tree, ``None`` where not given).
        host, port: where to listen.
        log_json: JSON log lines (the deprecated ``--log-json``; ``semdup --log-format json`` is the way).
        announce: where the one "serving ..." line goes in text mode (the CLI: stderr); in JSON mode it is logged.

    Raises:
        ConfigError: settings refused, a bundle that does not load, or a worker that cannot start.
    """
    from semdup.apps.http import configure_service_logging
    from semdup.apps.settings import HANDOFF_ENV, handoff, load_settings
    from semdup.service.http_protocol import PROTOCOL_PATH
    from semdup.service.workers import preflight, run_workers

    log_format = configure_service_logging("json" if log_json else None)
    tree = load_settings(overrides={**overrides, "logging.format": log_format})
    settings = tree.service_settings()  # fails here, before any worker starts (a short key: one Error line)
    workers = tree.workers()
    for warning in settings.startup_warnings():  # once, here, rather than once per worker
        logger.warning(warning)
    trusted = tree.service.forwarded_allow_ips
    if "*" in trusted:
        logger.warning(
            "SEMDUP_FORWARDED_ALLOW_IPS=* takes X-Forwarded-For from every client: each may choose the address its "
            "wrong keys are counted by. Name the reverse proxy's address instead (e.g. 10.0.0.5)"
        )
    # The workers' own load, once, before any starts (in a process of its own, so this supervisor keeps none of
    # its memory): a bad bundle is one Error line, not workers dying one after the other.
    version = preflight(settings, log_format)
    line = (
        f"serving {settings.bundle} (model {version}) on index {settings.index} at http://{host}:{port} "
        f"({workers} worker{'s' if workers > 1 else ''}, auth {'on' if settings.auth else 'OFF'})"
    )
    tree, runtime, note = share_between_workers(tree, review=settings.review_enabled)
    if settings.review_enabled:
        line += f"; review page at http://{host}:{port}/review{note}"
    # uvicorn's worker processes are spawned: they get the resolved tree, CLI options included, as one variable
    os.environ[HANDOFF_ENV] = handoff(tree)
    if log_format == "json":
        logger.info(line)
    else:
        announce(line)
    try:
        run_workers(  # raises ConfigError (one Error line, exit 1) when a worker cannot start
            "semdup.apps.http:app_from_env",  # the service with every router (semdup.apps, the composition root)
            http=PROTOCOL_PATH,  # TCP_NODELAY on every connection: uvicorn's multi-worker socket leaves it off
            host=host,
            port=port,
            workers=workers,
            log_level="info",
            access_log=False,
            # X-Forwarded-For only from the proxies the operator named (uvicorn's default trusts 127.0.0.1, so any
            # local client could choose the address its failures count against: issue #34)
            proxy_headers=bool(trusted),
            forwarded_allow_ips=",".join(trusted) or None,
            log_config=None,  # no handlers of uvicorn's own: its records go through semdup's root handler
        )
    finally:
        if runtime is not None:
            runtime.cleanup()
