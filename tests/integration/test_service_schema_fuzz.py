"""A schema-driven fuzzer (schemathesis) against the service on a real OpenSearch: every request the OpenAPI
document allows is answered as the document says (no 500, no undocumented status or body, schema-valid posts
accepted), and the generated requests reach the search path (issue #13, item 9: before, all of them got 400)."""

# ruff: noqa: F811  (the module-scoped fixtures are imported from conftest)
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from settings_tree import service_settings

from semdup.apps.http import create_app
from semdup.bundle.bundle import Bundle
from semdup.core.settings import OpenSearchSettings

pytestmark = pytest.mark.slow

KEY = "fuzz-key-3e1d-7d2f0c9e4b1a"
OPERATIONS = [
    ("/v1/rerank", "POST", 120),
    ("/v1/similar", "GET", 60),
    ("/readyz", "GET", 5),
    ("/healthz", "GET", 5),
    ("/metrics", "GET", 5),
]


@pytest.fixture(scope="module")
def service_schema(served: tuple[Bundle, str], tiny_bundle: Path, opensearch_url: str) -> Any:
    _, index = served
    # KEY searches and reads /metrics and /openapi.json (ops); no throttling of the wrong keys schemathesis sends on
    # purpose (its check wants their 401, not our 429)
    config = {"bundle": str(tiny_bundle), "index": index, "api_keys": f"{KEY}:*:search|ops", "max_text_chars": 5000}
    config["auth_failures"] = "1000000"
    app = create_app(service_settings(config, OpenSearchSettings(url=opensearch_url)))
    return schemathesis.openapi.from_asgi("/openapi.json", app, headers={"X-API-Key": KEY})


def test_every_schema_valid_request_is_answered_as_documented(service_schema: Any) -> None:
    """schemathesis' checks on every answer (not a server error, documented status, content type and body,
    schema-valid data accepted); Hypothesis generates the requests, bounded by ``max_examples``."""
    statuses: Counter[tuple[str, int]] = Counter()
    for path, method, examples in OPERATIONS:
        fuzz(service_schema[path][method], examples, statuses)
    assert statuses["/v1/rerank", 200] > 0, statuses  # the search path was reached
    assert statuses["/v1/similar", 200] > 0, statuses


def fuzz(operation: Any, examples: int, statuses: Counter[tuple[str, int]]) -> None:
    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(operation.as_strategy())
    def answered_as_documented(case: Any) -> None:
        response = case.call_and_validate(headers={"X-API-Key": KEY})
        statuses[operation.path, response.status_code] += 1

    answered_as_documented()
