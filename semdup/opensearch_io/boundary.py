"""The one OpenSearch boundary: what semdup takes from opensearch-py, besides the client's constructor
(:mod:`semdup.opensearch_io.clients`), passes here and leaves as semdup's own types.

httpx's ``map_httpcore_exceptions`` is the model. :func:`map_client_errors` turns each client error into the most
specific semdup error (:mod:`semdup.core.errors`), raised ``from`` it and keeping OpenSearch's status, error type
and reason; :class:`MappedTransport`, the transport of every client :func:`~semdup.opensearch_io.clients.connect`
builds, runs each request inside it. So no call site catches an opensearch-py type, or needs a wrapper of its own::

    the client raises                    semdup raises
    ConnectionTimeout                    SearchTimeout            (an OpenSearchUnavailable)
    ConnectionError, SSLError            OpenSearchUnavailable    status None, type: the client's error
    HTTP 429, 502, 503, 504              OpenSearchUnavailable    status, type, reason
    ScanError (shards failed a scroll)   OpenSearchUnavailable    status None, type ScanError
    HTTP 404                             OpenSearchMissing        (an OpenSearchRefused and a SearchIndexError)
    any other HTTP status                OpenSearchRefused        status, type, reason
    a body it cannot (de)serialize       OpenSearchRefused        status None, type SerializationError

A bulk request answers 200 while documents inside it fail: :class:`ItemFailure` keeps each one's id, status, type
and reason. :func:`is_transient` is the one rule of what is worth retrying, for requests and items alike
(429 / 502 / 503 / 504, or a rejection type). Decisions read status and type, never the text: the bug of 60a9514
(a "429" inside an index name made a write block look transient) came from parsing the text.

Also here, so that nothing else imports opensearch-py: its ``scan``, ``streaming_bulk`` and ``expand_action``
helpers (they call the client, so their errors are mapped as well), the client's JSON serializer on orjson, and
``OpenSearch``, the client's type, for annotations. A client built elsewhere raises opensearch-py's own errors:
build it with ``transport_class=MappedTransport`` (as ``connect`` does).

Example::

    try:
        client.indices.create(index="travel", body=body)
    except OpenSearchRefused as exc:
        if exc.type != "resource_already_exists_exception":
            raise
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opensearchpy import OpenSearch, Transport, helpers
from opensearchpy import exceptions as os_exc
from opensearchpy.helpers import expand_action, streaming_bulk

from semdup.core.errors import (
    OpenSearchError,
    OpenSearchMissing,
    OpenSearchRefused,
    OpenSearchUnavailable,
    SearchTimeout,
)
from semdup.core.settings import START_HINT

__all__ = [
    "OpenSearch",
    "MappedTransport",
    "map_client_errors",
    "client_error",
    "ItemFailure",
    "is_transient",
    "error_reason",
    "mget_docs",
    "orjson_serializer",
    "scan",
    "streaming_bulk",
    "expand_action",
    "TRANSIENT_STATUS",
    "NO_PIPELINE",
    "own_search_params",
    "site_searches",
]

TRANSIENT_STATUS = frozenset({429, 502, 503, 504})  # overloaded, or a node between the client and the cluster down
# A document rejected as overloaded inside a bulk answer (its status may say 429, or only its type).
_OVERLOADED_TYPES = frozenset(
    {
        "rejected_execution_exception",
        "opensearch_rejected_execution_exception",
        "es_rejected_execution_exception",
        "circuit_breaking_exception",
        "too_many_requests",
    }
)
_REASON_CHARS = 500
# urllib3 starts its connection errors with the connection object's repr, which says nothing to an operator.
_OBJECT = re.compile(r"<[^<>]* object at 0x[0-9a-fA-F]+>:?")
_PATH_CHARS = 200
NO_PIPELINE = "_none"  # OpenSearch's name for "no search pipeline, not even the index's default"
_NO_PIPELINE_FIELD = f'"search_pipeline":"{NO_PIPELINE}"'
# An index's (or all indices') search APIs; a plugin's own search (``/_plugins/_ml/connectors/_search``) is not one
# of them and refuses the parameter. Index names never start with "_".
_INDICES = r"(?:/[^_/][^/]*)?"
_INDEX_SEARCH = re.compile(_INDICES + r"/_search(?:/template)?")
_INDEX_MSEARCH = re.compile(_INDICES + r"/_msearch")
_INDEX_COUNT = re.compile(_INDICES + r"/_count")


def is_transient(status: int | None, type: str | None = None) -> bool:
    """Worth retrying later: OpenSearch was overloaded (429 or a rejection type) or a node on the way was down
    (502 / 503 / 504). No answer at all is transient too, but that is an error, never an item."""
    return status in TRANSIENT_STATUS or type in _OVERLOADED_TYPES


def error_reason(error: Any) -> str:
    """What an OpenSearch error body says went wrong: its first root cause's reason, else its own reason, else the
    error as text (a bare type such as "action_request_validation_exception" says neither which request nor why)."""
    if isinstance(error, dict):
        causes = error.get("root_cause")
        if isinstance(causes, list) and causes and isinstance(causes[0], dict) and causes[0].get("reason"):
            return str(causes[0]["reason"])
        if error.get("reason"):
            return str(error["reason"])
    return str(error)


def client_error(exc: BaseException, method: str, path: str, timeout: float | None = None) -> OpenSearchError:
    """The semdup error for ``exc``, an opensearch-py error raised by ``method path`` (table in the module doc);
    ``timeout`` is the request's, for the message."""
    path = path if len(path) <= _PATH_CHARS else path[:_PATH_CHARS] + "..."
    asked = f"{method} {path}"
    if isinstance(exc, os_exc.ConnectionTimeout):
        within = f"within {timeout:g} s" if timeout else "within the client's timeout"
        return SearchTimeout(
            f"OpenSearch did not answer {asked} {within}; check the cluster's load, or raise the timeout "
            "(SEMDUP_OPENSEARCH_TIMEOUT; the reranker's: SEMDUP_SEARCH_TIMEOUT)",
            type="ConnectionTimeout",
        )
    if isinstance(exc, os_exc.ConnectionError):
        cause = type(exc.info).__name__ if isinstance(exc.info, BaseException) else type(exc).__name__
        if isinstance(exc, os_exc.SSLError):  # what the TLS library said is what fixes it (the CA, the name)
            cause = f"{cause}: {exc.info!s:.200}"
        elif said := _OBJECT.sub("", str(exc.error or "")).strip()[:200]:  # refused, reset, no such host...
            cause = f"{cause}: {said}"
        return OpenSearchUnavailable(
            f"OpenSearch did not answer {asked} ({cause}); {START_HINT}", type=type(exc).__name__, reason=cause
        )
    if isinstance(exc, helpers.ScanError):  # some shards failed a scroll page: a cluster recovering, or overloaded
        return OpenSearchUnavailable(
            f"OpenSearch answered {asked} for only some shards ({exc!s:.300}); run it again",
            type="ScanError",
            reason=str(exc)[:_REASON_CHARS],
        )
    if not isinstance(exc, os_exc.TransportError):
        return OpenSearchRefused(
            f"OpenSearch client error {type(exc).__name__}: {exc!s:.300} ({asked})",
            type=type(exc).__name__,
            reason=str(exc)[:_REASON_CHARS],
        )
    status = exc.status_code if isinstance(exc.status_code, int) else None
    body = exc.info.get("error") if isinstance(exc.info, dict) else None
    kind = body.get("type") if isinstance(body, dict) else None
    if isinstance(body, dict):
        reason = error_reason(body)
    elif isinstance(body, str):
        reason = body
    else:
        reason = str(exc.info or exc.error or "")
    reason = reason[:_REASON_CHARS]
    said = ": ".join(x for x in (kind, reason) if x)
    detail = f"HTTP {status}{': ' + said if said else ''}"
    kw: dict[str, Any] = {"status": status, "type": kind, "reason": reason}
    if is_transient(status, kind):
        return OpenSearchUnavailable(f"OpenSearch answered {asked} with {detail}; it is retried later", **kw)
    if status == 404:
        return OpenSearchMissing(f"OpenSearch has no such index, document or template: {asked} ({detail})", **kw)
    if status == 403 and kind == "security_exception":  # the security plugin: this user's roles do not allow it
        return OpenSearchRefused(
            f"OpenSearch refused {asked} ({detail}); the user's roles do not allow it (`semdup roles print` writes "
            "the roles semdup's users need)",
            **kw,
        )
    return OpenSearchRefused(f"OpenSearch refused {asked} ({detail})", **kw)


def mget_docs(answer: dict[str, Any], asked: str) -> list[dict[str, Any]]:
    """The ``docs`` of an ``mget`` answer, raising the first document's own error: an ``mget`` answers 200 while a
    document inside fails (a user without ``indices:data/read/mget[shard]`` on its index, a shard not there), and such
    a document has no ``found``. Read as absent, it would pass for a post the site deleted (and its companion
    document would be removed). ``asked``: the request, for the message (e.g. ``"GET /_mget (site-posts)"``)."""
    docs = answer.get("docs") or []
    for doc in docs:
        error = doc.get("error")
        if error is None:
            continue
        kind = error.get("type") if isinstance(error, dict) else None
        reason = error_reason(error)[:_REASON_CHARS]
        where = f"{asked}: document {str(doc.get('_id'))[:80]} of {doc.get('_index')}"
        if kind == "security_exception":
            raise OpenSearchRefused(
                f"OpenSearch refused {where} (HTTP 403: {kind}: {reason}); the user's roles do not allow it "
                "(`semdup roles print` writes the roles semdup's users need)",
                status=403, type=kind, reason=reason,
            )  # fmt: skip
        raise OpenSearchUnavailable(f"OpenSearch could not read {where} ({kind}: {reason}); it is retried later",
                                    type=kind, reason=reason)  # fmt: skip
    return docs


@contextmanager
def map_client_errors(method: str, path: str, timeout: float | None = None) -> Iterator[None]:
    """Raise the semdup error of any opensearch-py error inside the block (:func:`client_error`), ``from`` it."""
    try:
        yield
    except (os_exc.OpenSearchException, os_exc.ImproperlyConfigured) as exc:
        raise client_error(exc, method, path, timeout) from exc


def scan(client: OpenSearch, query: Any = None, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """opensearch-py's ``scan`` helper (every hit of a scroll), with the error it raises itself when shards fail
    (``ScanError``, not the client's) mapped as well; the client's own errors are mapped by its transport."""
    with map_client_errors("GET", f"/{kwargs.get('index', '')}/_search?scroll"):
        yield from helpers.scan(client, query, **kwargs)


def own_search_params(url: str, params: Any, body: Any, pipelines: bool = False) -> tuple[Any, Any]:
    """``(params, body)`` of a search semdup makes for itself, made to run no search pipeline, not even the index's
    default one, which may be semdup's own (issue #45: semdup's ``_msearch`` went through it and called semdup
    again, five times deep). Measured on OpenSearch 2.19.1 (a default pipeline that fails every search it runs):
    ``_search``, ``_search/template`` and a scroll's first page take ``search_pipeline=_none`` in the query string;
    ``_msearch`` refuses that parameter and the header key, so each of its search bodies gets
    ``"search_pipeline": "_none"``; ``_count`` runs the default pipeline and refuses the parameter, so it is sent as
    a ``_search`` (:meth:`MappedTransport.perform_request`); ``_msearch/template`` has no way to name none. A search
    that names a pipeline keeps it, and ``pipelines`` True (a client that searches as the site does,
    :func:`site_searches`) leaves every search as it is."""
    path = url.split("?", 1)[0]
    if pipelines or (params and "search_pipeline" in params):
        return params, body
    if _INDEX_SEARCH.fullmatch(path):
        if isinstance(body, dict) and "search_pipeline" in body:
            return params, body
        return {**(params or {}), "search_pipeline": NO_PIPELINE}, body
    if _INDEX_MSEARCH.fullmatch(path) and isinstance(body, str):
        lines = body.split("\n")
        for n in range(1, len(lines), 2):  # header, body, header, body ... (each one line of JSON)
            line = lines[n].strip()
            if line.startswith("{") and '"search_pipeline"' not in line:
                lines[n] = "{" + _NO_PIPELINE_FIELD + ("," if line[1:].strip() != "}" else "") + line[1:]
        return params, "\n".join(lines)
    return params, body


def site_searches(client: Any) -> Any:
    """``client``, its searches left to the index's default search pipeline, as a site's application searches
    (``semdup pipeline check``'s comparison, the tests that act as the site); every other client semdup builds
    searches without one (:func:`own_search_params`)."""
    client.transport.pipelines = True
    return client


class MappedTransport(Transport):
    """opensearch-py's transport (its retries on 502 / 503 / 504 and connection errors, its node pool), with
    every request's errors raised as semdup's (:func:`map_client_errors`), and every search of semdup's own made
    without a search pipeline (:func:`own_search_params`)."""

    pipelines = False  # True: searches run the index's default search pipeline (site_searches)

    def perform_request(
        self,
        method: str,
        url: str,
        params: Any = None,
        body: Any = None,
        timeout: Any = None,
        ignore: Any = (),
        headers: Any = None,
    ) -> Any:
        within = timeout or (params or {}).get("request_timeout") or self.kwargs.get("timeout")
        path = url.split("?", 1)[0]
        if _INDEX_COUNT.fullmatch(path) and not self.pipelines and isinstance(body, dict | None):
            # _count runs the index's default search pipeline and takes no search_pipeline: a size-0 _search
            search = {**(body or {}), "size": 0, "track_total_hits": True}
            got = self.perform_request("POST", path[: -len("_count")] + "_search", params=params, body=search,
                                       timeout=timeout, ignore=ignore, headers=headers)  # fmt: skip
            return {"count": got["hits"]["total"]["value"], "_shards": got.get("_shards")}
        params, body = own_search_params(url, params, body, self.pipelines)
        with map_client_errors(method, url, within):
            return super().perform_request(
                method, url, params=params, body=body, timeout=timeout, ignore=ignore, headers=headers
            )


@dataclass(frozen=True)
class ItemFailure:
    """One document a write did not take: its ``_id``, the HTTP ``status`` of its bulk item (None: refused before
    any request, e.g. a post with no text), OpenSearch's error ``type`` (or semdup's, ``PostError``) and
    ``reason``. What is done with it reads :attr:`transient` and :attr:`missing`, never the text."""

    id: str
    status: int | None
    type: str | None
    reason: str

    @property
    def transient(self) -> bool:
        """Rejected as overloaded (or a node was down): the write is retried, not parked."""
        return is_transient(self.status, self.type)

    @property
    def missing(self) -> bool:
        """404: the document (a delete's) or its index is not there."""
        return self.status == 404

    def __str__(self) -> str:
        head = f"HTTP {self.status} " if self.status is not None else ""
        return f"{head}{self.type or 'error'}: {self.reason}"

    def error(self, message: str, kind: type[OpenSearchError] = OpenSearchUnavailable) -> OpenSearchError:
        """``kind(message)`` carrying this failure's status, type and reason: how a write that must not be lost
        says which document stopped it (the caller raises it)."""
        return kind(message, status=self.status, type=self.type, reason=self.reason)

    @classmethod
    def of_item(cls, item: dict[str, Any]) -> ItemFailure:
        """From one item of a bulk answer (``{"_id", "status", "error": {...}}``; a delete of a document that is not
        there has no error, only ``"result": "not_found"``)."""
        error = item.get("error")
        status = item.get("status")
        status = status if isinstance(status, int) else None
        if isinstance(error, dict):
            kind, reason = error.get("type"), error_reason(error)
        elif error is not None:
            kind, reason = None, str(error)
        else:
            kind = reason = str(item.get("result") or "")
        return cls(str(item.get("_id")), status, kind or None, reason[:_REASON_CHARS])

    @classmethod
    def of_error(cls, doc_id: str, exc: BaseException) -> ItemFailure:
        """A document refused on its own, by a whole request (``OpenSearchError``) or before any (``PostError``)."""
        if isinstance(exc, OpenSearchError):
            return cls(str(doc_id), exc.status, exc.type or type(exc).__name__, exc.reason or str(exc))
        return cls(str(doc_id), None, type(exc).__name__, str(exc))


@functools.cache
def orjson_serializer() -> Any:
    """The client's JSON (de)serializer on orjson: a rerank reads ~100 hits with their docvalue fields, and
    opensearch-py's stdlib ``json`` parsing was a visible part of it. Whatever orjson refuses (an integer
    beyond 64 bits, a type it cannot write) goes through the stdlib serializer, as before.
    """
    import orjson
    from opensearchpy.serializer import JSONSerializer

    class OrjsonSerializer(JSONSerializer):
        def loads(self, s: str) -> Any:
            try:
                return orjson.loads(s)
            except orjson.JSONDecodeError:
                return super().loads(s)  # raises SerializationError on text that is not JSON at all

        def dumps(self, data: Any) -> Any:
            if isinstance(data, str):
                return data
            try:
                return orjson.dumps(data, default=self.default, option=orjson.OPT_SERIALIZE_NUMPY).decode("utf-8")
            except (orjson.JSONEncodeError, os_exc.SerializationError):
                return super().dumps(data)

    return OrjsonSerializer()
