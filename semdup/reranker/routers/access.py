"""Who may call the service, and which index a request may name: the dependencies every router shares.

A router's endpoints are module-level functions; the app factory binds each to its app (:func:`bind`): the request
body model with this server's bounds (:mod:`.schemas`) and the access dependency (:func:`key_access`, or
:func:`open_access` when ``SEMDUP_AUTH=off``). What an endpoint needs at run time it reads from ``app.state``
(:func:`state`): the settings, the reranker, the ingest sender, the admission gate.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader

from semdup.core.errors import SearchIndexError
from semdup.reranker.routers.schemas import API_KEY_HEADER, MAX_INDEX_CHARS, NOT_SERVED
from semdup.reranker.settings import ServiceSettings

__all__ = ["AuthError", "KEY_HEADER", "key_access", "open_access", "access_for", "served_index", "state", "bind"]


class AuthError(Exception):
    """A missing or wrong ``X-API-Key`` (the app answers 401)."""


KEY_HEADER = APIKeyHeader(
    name=API_KEY_HEADER,
    auto_error=False,
    description="The service's API key (SEMDUP_API_KEY, or one of SEMDUP_API_KEYS).",
)


def state(request: Request) -> Any:
    """The app's state: ``settings``, ``reranker``, ``sender``, ``gate``, ``metrics``, ``probes`` (the factory)."""
    return request.app.state


def key_access(request: Request, given: str | None = Security(KEY_HEADER)) -> tuple[str, ...]:
    """The indices the request's key may search; 401 (:class:`AuthError`) for a missing or wrong key."""
    allowed = state(request).settings.key_indices(given)
    if allowed is None:
        raise AuthError("missing or wrong API key; send it in the X-API-Key header")
    return allowed


def open_access(request: Request) -> tuple[str, ...]:
    """Every served index (access control off, ``SEMDUP_AUTH=off``)."""
    return state(request).settings.indices


def access_for(settings: ServiceSettings) -> Callable[..., tuple[str, ...]]:
    return key_access if settings.auth else open_access


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
