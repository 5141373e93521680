"""The reranker's OpenSearch calls, their client errors raised as semdup's.

Every call carries an explicit ``request_timeout``; :func:`call_opensearch` maps what the client raises:

    SemdupError
    ├── OpenSearchUnavailable      refused or reset connection, HTTP 429, 502, 503, 504 (the service: 503)
    │   └── SearchTimeout          no answer within the request timeout (504)
    └── SearchIndexError           the index does not exist (404)
    any other refusal: SemdupError with OpenSearch's status, error type and reason
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opensearchpy import exceptions as os_exc

from semdup.core.clients import error_reason
from semdup.core.errors import OpenSearchUnavailable, SearchIndexError, SemdupError

__all__ = ["SearchTimeout", "call_opensearch"]


class SearchTimeout(OpenSearchUnavailable):
    """OpenSearch did not answer within the reranker's request timeout (the service answers 504)."""


def call_opensearch(fn: Callable[..., Any], what: str, **kwargs: Any) -> Any:
    """``fn(**kwargs)``, a client method, with its errors mapped onto semdup's (module doc); ``what`` says what was
    asked ("searching candidates in 'travel'") for the message."""
    try:
        return fn(**kwargs)
    except os_exc.ConnectionTimeout as exc:
        timeout = kwargs.get("request_timeout") or (kwargs.get("params") or {}).get("request_timeout")
        within = f"within {timeout} s" if timeout is not None else "within the client's timeout"
        raise SearchTimeout(
            f"OpenSearch did not answer {what} {within}; raise SEMDUP_SEARCH_TIMEOUT or check the cluster's load"
        ) from exc
    except os_exc.ConnectionError as exc:
        raise OpenSearchUnavailable(
            f"OpenSearch did not answer {what} ({exc.__class__.__name__}); start the embedded one with "
            "`semdup opensearch start` or set SEMDUP_OPENSEARCH_URL"
        ) from exc
    except os_exc.NotFoundError as exc:
        raise SearchIndexError(
            f"{what}: index not found ({getattr(exc, 'error', exc)}); index posts into it first"
        ) from exc
    except os_exc.TransportError as exc:
        if exc.status_code in (502, 503, 504) or exc.status_code == 429:
            raise OpenSearchUnavailable(f"OpenSearch answered HTTP {exc.status_code} {what}: {exc.error}") from exc
        err = exc.info.get("error") if isinstance(exc.info, dict) else None
        reason = f"{exc.error}: {error_reason(err)[:500]}" if isinstance(err, dict) else str(exc.error)
        raise SemdupError(f"OpenSearch refused {what} (HTTP {exc.status_code}): {reason}") from exc
