"""Who may call the service, and which index a request may name: the dependencies every router shares.

A router's endpoints are module-level functions; the app factory binds each to its app (:func:`bind`): the request
body model with this server's bounds (:mod:`.schemas`) and the access dependency of its scope (:func:`key_access`
for ``search``, :func:`ingest_access` for ``ingest``, or :func:`open_access` when ``SEMDUP_AUTH=off``). What an
endpoint needs at run time it reads from ``app.state`` (:func:`state`): the settings, the reranker, the ingest
broker (the Celery app ingest publishes through), the admission gate, the failure throttle.

Every key check goes through :func:`authenticate`: a blocked address, or a blocked wrong key from it, gets 429
(:class:`Throttled`) before the key is looked at, a wrong key 401 (:class:`AuthError`, counted as a failure of that
key and, the first time in a window, of the address, :mod:`semdup.service.auth_throttle`), a right key without the
scope 403 (:class:`ScopeError`). A wrong key that starts a block is logged once, by the SHA-256 label the operator
can match with a connector's key. The review page uses it too, so its logins and the API share one count per
address.
"""

from __future__ import annotations

import asyncio
import logging
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from semdup.core.errors import SearchIndexError
from semdup.reranker.reranker import ModelMismatch, NothingIndexed
from semdup.service.auth_throttle import FailureThrottle, Throttled, client_address, key_label
from semdup.service.routers.schemas import API_KEY_HEADER, MAX_INDEX_CHARS, NOT_SERVED
from semdup.service.settings import INGEST, OPS, SEARCH, ApiKey, ServiceSettings

__all__ = [
    "searchable",
    "AuthError",
    "ScopeError",
    "Throttled",
    "KEY_HEADER",
    "authenticate",
    "key_access",
    "ingest_access",
    "ops_access",
    "open_access",
    "access_for",
    "require_scope",
    "served_index",
    "state",
    "bind",
]

logger = logging.getLogger(__name__)


@contextmanager
def searchable(name: str) -> Iterator[None]:
    """Searching a served index: one that cannot be searched (missing, closed, unreadable) answers as an index the key
    may not name, the not-served 404, with the cause in the log only; a model mismatch and an index with nothing
    indexed keep their own answer (409)."""
    try:
        yield
    except SearchIndexError as exc:
        if isinstance(exc, (ModelMismatch, NothingIndexed)):
            raise
        logger.warning("served index %s cannot be searched: %s", name, exc)
        raise SearchIndexError(NOT_SERVED.format(name=name)) from exc


class AuthError(Exception):
    """A missing or wrong ``X-API-Key`` (the app answers 401)."""


class ScopeError(Exception):
    """A right key without the scope the endpoint needs (the app answers 403)."""


KEY_HEADER = APIKeyHeader(
    name=API_KEY_HEADER,
    auto_error=False,
    description="The service's API key (SEMDUP_API_KEY, or one of SEMDUP_API_KEYS).",
)


def state(request: Request) -> Any:
    """The app's state: ``settings``, ``reranker``, ``broker``, ``gate``, ``metrics``, ``probes`` (the factory)."""
    return request.app.state


BEARER = HTTPBearer(
    auto_error=False,
    description="An API key as a bearer token: the ops scope for scrapers, the search scope for connectors.",
)


def _count(request: Request, what: str) -> None:
    """Count a failure or a refusal in the app's metrics (:class:`semdup.service.metrics.ServiceMetrics`), if it has
    any."""
    count = getattr(getattr(request.app.state, "metrics", None), "auth_event", None)
    if count is not None:
        count(request.url.path, what)


def authenticate(
    request: Request, settings: ServiceSettings, throttle: FailureThrottle, given: str | None, scope: str
) -> ApiKey:
    """The configured key ``given`` when it holds ``scope``.

    Raises:
        Throttled: the client's address, or this wrong key from it, failed too often (429); the key is not looked at.
        AuthError: no key, or a wrong one (401); a wrong one counts as a failure of that key (and, the first time in
            a window, of the address).
        ScopeError: the key lacks ``scope`` (403).
    """
    if not given:
        raise AuthError(f"missing API key; send a key with the {scope} scope in the X-API-Key header")
    address = client_address(request.client.host if request.client else None)
    left = throttle.blocked(address, given)
    if left:
        _count(request, "throttled")
        raise Throttled(left)
    entry = settings.key_of(given)
    if entry is None:
        _count(request, "failed")
        left = throttle.fail(address, given)
        if left:
            _log_block(request, throttle, address, given, left)
            _count(request, "throttled")
            raise Throttled(left)
        raise AuthError("wrong API key; send a key of this service in the X-API-Key header")
    if scope not in entry.scopes:
        raise ScopeError(f"this API key has no {scope} scope; use a key with the {scope} scope")
    return entry


def _log_block(request: Request, throttle: FailureThrottle, address: str, key: str, left: float) -> None:
    """The one warning a block starts with: the operator learns which address or key, and what it costs."""
    if throttle.blocked(address):
        logger.warning("%s: %d wrong keys or logins from %s within %.0f s: every key from it gets 429 for %.0f s",
                       request.url.path, throttle.limit, address, throttle.window, left)  # fmt: skip
        return
    logger.warning(
        "%s: one wrong key (%s) from %s was sent %d times: it gets 429 for %.0f s, other keys from %s are not "
        "slowed; a search pipeline whose connector holds it ranks nothing (its searches run in the site's own "
        "order, or fail with --on-failure error) until `semdup pipeline create --replace-key` gives it the right key",
        request.url.path, key_label(key), address, throttle.limit, left, address,
    )  # fmt: skip


def _access(request: Request, given: str | None, scope: str) -> tuple[str, ...]:
    st = state(request)
    return authenticate(request, st.settings, st.throttle, given, scope).indices or st.settings.indices


def key_access(
    request: Request,
    given: str | None = Security(KEY_HEADER),
    bearer: HTTPAuthorizationCredentials | None = Security(BEARER),
) -> tuple[str, ...]:
    """The indices the request's key may search (``search`` scope: ``/v1/rerank``, ``/v1/similar``, the pipeline
    endpoints), in ``X-API-Key`` or as ``Authorization: Bearer`` (what an ml-commons connector sends); 401, 403 or
    429 otherwise (:func:`authenticate`)."""
    return _access(request, given or (bearer.credentials if bearer else None), SEARCH)


def ingest_access(request: Request, given: str | None = Security(KEY_HEADER)) -> tuple[str, ...]:
    """The indices the request's key may write (``ingest`` scope: ``/v1/posts`` and the others); 401, 403 or 429
    otherwise (:func:`authenticate`)."""
    return _access(request, given, INGEST)


async def ops_access(
    request: Request,
    given: str | None = Security(KEY_HEADER),
    bearer: HTTPAuthorizationCredentials | None = Security(BEARER),
) -> None:
    """``/metrics`` and ``/openapi.json``: a key with the ``ops`` scope, in ``X-API-Key`` or as a bearer token
    (Prometheus's ``authorization``), while ``SEMDUP_OPS_AUTH`` and access control are on; else open. The check
    runs on the probes' own threads (``app.state.probes``): a scrape never waits behind the reranks."""
    st = state(request)
    if st.settings.auth and st.settings.ops_auth:
        key = given or (bearer.credentials if bearer else None)
        await asyncio.wrap_future(st.probes.submit(authenticate, request, st.settings, st.throttle, key, OPS))


def require_scope(request: Request, scope: str, why: str) -> None:
    """A request that passed its endpoint's access check must also hold ``scope`` for what it asks (``why``, said in
    the 403): the key is read again from the request (``X-API-Key``, else ``Authorization: Bearer``); nothing is
    checked with access control off.

    Raises:
        ScopeError: the key lacks ``scope`` (403).
    """
    st = state(request)
    if not st.settings.auth:
        return
    given = request.headers.get(API_KEY_HEADER)
    if not given:
        scheme, _, token = (request.headers.get("authorization") or "").partition(" ")
        given = token.strip() if scheme.lower() == "bearer" else None
    entry = st.settings.key_of(given) if given else None
    if entry is None or scope not in entry.scopes:
        held = "|".join(entry.scopes) if entry else "none"
        raise ScopeError(f"{why} needs a key with the {scope} scope; this key has {held}")


def open_access(request: Request) -> tuple[str, ...]:
    """Every served index (access control off, ``SEMDUP_AUTH=off``)."""
    return state(request).settings.indices


def access_for(settings: ServiceSettings, scope: str = SEARCH) -> Callable[..., tuple[str, ...]]:
    """The access dependency of an endpoint that needs ``scope`` (``search`` or ``ingest``)."""
    if not settings.auth:
        return open_access
    return ingest_access if scope == INGEST else key_access


def served_index(settings: ServiceSettings, requested: str | None, allowed: tuple[str, ...]) -> str:
    """The index a request names (else the default), by exact name among ``allowed``: no pattern, alias or other
    index is ever sent on. 404 (:class:`SearchIndexError`) otherwise, one answer for "not yours" and "not there"."""
    name = requested or settings.default_index(allowed)
    if name not in allowed:
        raise SearchIndexError(NOT_SERVED.format(name=name[:MAX_INDEX_CHARS]))
    return name


def bind(endpoint: Callable[..., Any], body: type, access: Callable[..., Any]) -> Callable[..., Any]:
    """A copy of the module-level ``endpoint`` for one app: its ``req`` parameter typed with this app's ``body``
    model (a class made from the settings, which FastAPI could not look up by name) and its ``allowed`` parameter
    taken from ``access``. The function itself is left as it is, so it stays importable and callable alone."""
    copy = types.FunctionType(
        endpoint.__code__, endpoint.__globals__, endpoint.__name__, endpoint.__defaults__, endpoint.__closure__
    )
    copy.__kwdefaults__ = dict(endpoint.__kwdefaults__ or {})
    copy.__doc__, copy.__module__, copy.__qualname__ = endpoint.__doc__, endpoint.__module__, endpoint.__qualname__
    copy.__annotations__ = {**endpoint.__annotations__, "req": body}
    names = endpoint.__code__.co_varnames[: endpoint.__code__.co_argcount]
    defaults = list(endpoint.__defaults__ or ())
    at = names.index("allowed") - (len(names) - len(defaults))
    defaults[at] = Depends(access)
    copy.__defaults__ = tuple(defaults)
    return copy
