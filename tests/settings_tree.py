"""Settings for tests, through the one settings tree (:mod:`semdup.apps.settings`) as every process reads them:
``values`` are the keys of a config file's flat ``reranker:`` section (strings as from the environment, or typed)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from semdup.apps.settings import load_settings
from semdup.core.settings import BrokerSettings, OpenSearchSettings
from semdup.service.settings import ServiceSettings


def service_settings(
    values: dict[str, Any], opensearch: OpenSearchSettings, broker: BrokerSettings | None = None
) -> ServiceSettings:
    data: dict[str, Any] = {"reranker": dict(values), "opensearch": asdict(opensearch)}
    if broker is not None:
        data["broker"] = {"url": broker.url}
    return load_settings(env={}, data=data).service_settings()
