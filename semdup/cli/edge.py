"""Where the CLI reads its settings: the one tree (:mod:`semdup.apps.settings`), once per command, and the
clients built from it. Commands only add what their options override (``--opensearch URL``, ``--bundle``)."""

from __future__ import annotations

from typing import Any

__all__ = ["settings", "client", "bundle_path", "connect_broker"]


def settings() -> Any:
    """This command's settings tree (environment > ``$SEMDUP_CONFIG`` > defaults), read on first use and kept for the
    rest of the command (on click's root context: a process that runs several commands reads it for each)."""
    import click

    from semdup.apps.settings import load_settings

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return load_settings()
    meta = ctx.find_root().meta
    if "semdup.settings" not in meta:
        meta["semdup.settings"] = load_settings()
    return meta["semdup.settings"]


def client(url: str | None = None, *, check: bool = True) -> Any:
    """A client of the configured cluster, or of ``url`` (``--opensearch``: credentials and TLS still come from the
    settings)."""
    from semdup.index_format.system_indices import use_store_shape
    from semdup.opensearch_io.clients import connect

    tree = settings()
    use_store_shape(tree.indices.store())  # the stores this command creates get the configured shards and replicas
    chosen = tree.opensearch_settings(url)
    return connect(chosen) if check else connect(chosen, check=False)


def bundle_path(given: str | None) -> str:
    """``--bundle``, else ``SEMDUP_BUNDLE`` (a usage error when neither)."""
    import click

    from semdup.core.errors import ConfigError

    try:
        return settings().bundle(given, what="this command")
    except ConfigError as exc:
        raise click.UsageError("no model bundle: pass --bundle PATH or set SEMDUP_BUNDLE") from exc


def connect_broker() -> Any:
    """Point the producers' Celery app (:mod:`semdup.ingest.celery_app`) at the configured broker and check that it
    answers.

    Raises:
        BrokerUnavailable: no broker configured, or it did not answer.
    """
    from semdup.ingest.celery_app import connect_broker as connect

    tree = settings()
    return connect(tree.broker_settings().url, visibility_timeout=tree.worker.visibility_timeout)
