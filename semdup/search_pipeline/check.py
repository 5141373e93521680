"""``semdup pipeline check``: one ``_search`` through the pipeline, compared with ``/v1/rerank`` for the same post.

The search is the one a site would send for a new question: a ``bool`` of ``match`` clauses, the title on the
index's title field and the body on its body field (the fields semdup reads the post from,
:func:`semdup.reranker.rewrite.post_of_search`). The same post goes to the service's ``/v1/rerank`` with the
pipeline's key. Equal top-k ids in the same order say the pipeline is in place and ranks as the service does.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from semdup.core.errors import ConfigError, OpenSearchUnavailable
from semdup.search_pipeline.setup import REWRITE_PATH, describe_connector, text_fields

__all__ = ["CheckResult", "site_search", "check_pipeline", "service_url_of", "text_fields"]


@dataclass(frozen=True)
class CheckResult:
    """The ids the pipeline's ``_search`` returned, those ``/v1/rerank`` returned, and whether they are equal."""

    pipeline: list[str]
    rerank: list[str]
    took_ms: int

    @property
    def equal(self) -> bool:
        return self.pipeline == self.rerank


def site_search(title: str, body: str, fields: tuple[str, str], size: int) -> dict[str, Any]:
    """The search body a site sends for a new post (module doc)."""
    should = [{"match": {field: {"query": text}}} for field, text in zip(fields, (title, body), strict=True) if text]
    return {"size": size, "_source": False, "query": {"bool": {"should": should}}}


def service_url_of(client: Any, name: str) -> str:
    """The service URL the pipeline's connector calls (from its action's URL)."""
    url = describe_connector(client, name)["actions"][0]["url"]
    return url[: -len(REWRITE_PATH)] if url.endswith(REWRITE_PATH) else url


def _rerank(service_url: str, key: str, index: str, title: str, body: str, k: int, timeout: float) -> list[str]:
    payload = json.dumps({"title": title, "body": body, "k": k, "index": index}).encode()
    request = urllib.request.Request(service_url.rstrip("/") + "/v1/rerank", data=payload, method="POST",
                                     headers={"X-API-Key": key, "Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 - the operator's own service
            return [c["id"] for c in json.loads(resp.read())["candidates"]]
    except urllib.error.HTTPError as exc:
        raise ConfigError(f"semdup's service answered /v1/rerank with HTTP {exc.code}: "
                          f"{exc.read()[:300].decode(errors='replace')}") from exc  # fmt: skip
    except (urllib.error.URLError, OSError) as exc:
        raise OpenSearchUnavailable(f"semdup's service at {service_url} does not answer: {exc}") from exc


def check_pipeline(client: Any, index: str, name: str, title: str, body: str, service_url: str, key: str,
                   k: int = 10, timeout: float = 30.0) -> CheckResult:  # fmt: skip
    """One ``_search`` of ``index`` through pipeline ``name`` and one ``/v1/rerank`` of the same post."""
    search = site_search(title, body, text_fields(client, index), k)
    got = client.search(index=index, body=search, params={"search_pipeline": name, "request_timeout": timeout})
    ids = [str(h["_id"]) for h in got["hits"]["hits"]]
    return CheckResult(ids, _rerank(service_url, key, index, title, body, k, timeout), int(got.get("took", 0)))
