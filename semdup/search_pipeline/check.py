"""``semdup pipeline check``: one ``_search`` through the pipeline, beside semdup's own answer and ``/v1/rerank``.

The search is the one a site would send for a new question: a ``bool`` of ``match`` clauses, the title on the
index's title field and the body on its body field (the fields semdup reads the post from,
:func:`semdup.reranker.rewrite.post_of_search`). Three rankings of it:

* the pipeline's: the site's ``_search`` with the pipeline;
* semdup's: the same search sent to the service's ``/v1/search/rewrite`` (what the pipeline's processor sends),
  its answered query run on the index without any pipeline. Equal ids in the same order say the pipeline is in
  place and the node ran semdup's query (a fallback to the site's own order would differ);
* ``/v1/rerank``'s, for the same post: the one-hop query's lexnorm divides by the best lexical score instead of
  the min-max over the candidates, and its k-NN finds its k in every segment, so its top k can differ from the
  rerank's in a few places (docs/results.md, "One hop"); how many they share is shown.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from semdup.core.errors import ConfigError, OpenSearchUnavailable
from semdup.search_pipeline.setup import REWRITE_PATH, describe_connector, text_fields

__all__ = ["CheckResult", "check_pipeline", "rewritten_ids", "service_url_of", "site_search", "text_fields"]


@dataclass(frozen=True)
class CheckResult:
    """The ids the pipeline's ``_search`` returned, those semdup's answer ranks run directly, those ``/v1/rerank``
    returned, and whether the first two are equal."""

    pipeline: list[str]
    semdup: list[str]
    rerank: list[str]
    took_ms: int

    @property
    def equal(self) -> bool:
        return self.pipeline == self.semdup

    @property
    def shared(self) -> int:
        """How many of the pipeline's ids ``/v1/rerank`` returned too."""
        return len(set(self.pipeline) & set(self.rerank))


def site_search(title: str, body: str, fields: tuple[str, str], size: int) -> dict[str, Any]:
    """The search body a site sends for a new post (module doc)."""
    should = [{"match": {field: {"query": text}}} for field, text in zip(fields, (title, body), strict=True) if text]
    return {"size": size, "_source": False, "query": {"bool": {"should": should}}}


def service_url_of(client: Any, name: str) -> str:
    """The service URL the pipeline's connector calls (from its action's URL)."""
    url = describe_connector(client, name)["actions"][0]["url"]
    return url[: -len(REWRITE_PATH)] if url.endswith(REWRITE_PATH) else url


def _post(service_url: str, path: str, key: str, payload: dict[str, Any], timeout: float) -> Any:
    request = urllib.request.Request(service_url.rstrip("/") + path, data=json.dumps(payload).encode(), method="POST",
                                     headers={"X-API-Key": key, "Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 - the operator's own service
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise ConfigError(f"semdup's service answered {path} with HTTP {exc.code}: "
                          f"{exc.read()[:300].decode(errors='replace')}") from exc  # fmt: skip
    except (urllib.error.URLError, OSError) as exc:
        raise OpenSearchUnavailable(f"semdup's service at {service_url} does not answer: {exc}") from exc


def rewritten_ids(client: Any, index: str, search: dict[str, Any], service_url: str, key: str,
                  timeout: float = 30.0) -> list[str]:  # fmt: skip
    """The ids of ``search`` ranked by semdup's answer to the pipeline's call (``/v1/search/rewrite``), its query
    run on ``index`` by ``client`` without any pipeline (semdup's own client names none)."""
    answer = _post(service_url, REWRITE_PATH, key, {"index": index, "search": search}, timeout)
    got = client.search(index=index, body={**search, "query": answer["query"]}, params={"request_timeout": timeout})
    return [str(h["_id"]) for h in got["hits"]["hits"]]


def check_pipeline(client: Any, index: str, name: str, title: str, body: str, service_url: str, key: str,
                   k: int = 10, timeout: float = 30.0) -> CheckResult:  # fmt: skip
    """One ``_search`` of ``index`` through pipeline ``name``, the same search ranked by semdup's answer, and one
    ``/v1/rerank`` of the same post."""
    search = site_search(title, body, text_fields(client, index), k)
    got = client.search(index=index, body=search, params={"search_pipeline": name, "request_timeout": timeout})
    ids = [str(h["_id"]) for h in got["hits"]["hits"]]
    mine = rewritten_ids(client, index, search, service_url, key, timeout)
    ranked = _post(service_url, "/v1/rerank", key, {"title": title, "body": body, "k": k, "index": index}, timeout)
    return CheckResult(ids, mine, [c["id"] for c in ranked["candidates"]], int(got.get("took", 0)))
