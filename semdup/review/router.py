"""``/review``: the moderators' page and its verdict API (a FastAPI ``APIRouter``; needs ``app.state.review``).

    GET  /review                      the flagged pairs, newest first (?index=&min_probability=&page=&size=)
    GET  /review/login, POST          log in once with a key holding the review scope (?next= a local path)
    POST /review/logout               end the session (CSRF token in the form)
    POST /review/api/verdicts         {"index", "post_id", "candidate_id", "verdict": duplicate | not_duplicate}
    GET  /review/api/verdicts.jsonl   ?index= : the judged pairs as labelled JSONL (semdup.data.pairs)
    GET  /review/static/{name}        the page's script and style sheet (shipped in the package)

Access: the page runs on a server-side session (:mod:`semdup.review.sessions`: the cookie holds only its id;
logging out, the idle and absolute lifetimes and removing the key end it); the API takes the cookie (a state change
also needs the session's ``X-CSRF-Token``) or the key itself in ``X-API-Key`` (scripts; a header a browser never
adds on its own, so it needs no CSRF token). A key without the review scope gets 403, a wrong or missing one 401,
an address that sent too many wrong keys or logins 429 with ``Retry-After`` (one count with the API's keys,
:func:`semdup.service.routers.access.authenticate`), a pair that is not flagged, or is flagged in an index the key
may not review, 404 (one answer for both). Pages are served with a strict Content-Security-Policy (scripts and
styles from this origin only, no inline script), ``nosniff``, no framing and no referrer.
"""

from __future__ import annotations

import logging
from importlib import resources
from itertools import chain
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from semdup.core.errors import ConfigError
from semdup.review.context import ReviewContext, get_context
from semdup.review.export import export_pairs
from semdup.review.page import Filters, page_view
from semdup.review.queue import MAX_PAGE_SIZE
from semdup.review.sessions import REVIEW_ROOT, key_id, new_token, safe_next, same_token
from semdup.review.verdicts import VERDICTS, get_flag, record_verdict
from semdup.service.auth_throttle import Throttled, retry_after
from semdup.service.routers.access import AuthError, ScopeError, authenticate
from semdup.service.routers.schemas import NO_QUERY
from semdup.service.settings import REVIEW, ApiKey

__all__ = ["router", "SESSION_COOKIE", "LOGIN_COOKIE", "CSRF_HEADER"]

logger = logging.getLogger(__name__)

SESSION_COOKIE = "semdup_review"
LOGIN_COOKIE = "semdup_review_login"
CSRF_HEADER = "X-CSRF-Token"
_NOT_FLAGGED = "no such flagged pair in an index this key may review"
_STATIC = {"review.js": "text/javascript; charset=utf-8", "review.css": "text/css; charset=utf-8"}
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

router = APIRouter(prefix=REVIEW_ROOT, tags=["review"])
Context = Annotated[ReviewContext, Depends(get_context)]


class VerdictIn(BaseModel):
    """A reviewer's verdict on one flagged pair."""

    model_config = ConfigDict(extra="forbid", strict=True)

    index: str = Field(min_length=1, max_length=255, description="The index the pair was flagged in.")
    post_id: str = Field(min_length=1, max_length=512, description="The flagged (newer) post.")
    candidate_id: str = Field(min_length=1, max_length=512, description="The post it may duplicate.")
    verdict: Literal[VERDICTS] = Field(description="duplicate or not_duplicate.")  # type: ignore[valid-type]


class VerdictOut(BaseModel):
    """The stored verdict, and whether this request changed it (False: a replay, the first ``when`` kept)."""

    verdict: dict[str, Any]
    changed: bool


def _html(ctx: ReviewContext, template: str, status: int = 200, **values: Any) -> HTMLResponse:
    body = ctx.templates.get_template(template).render(**values)
    return HTMLResponse(body, status_code=status, headers=_HEADERS)


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def _session(request: Request, ctx: ReviewContext) -> tuple[ApiKey, str] | None:
    """(the reviewer's key, the session's CSRF token) of a live session whose key still reviews, else None."""
    found = ctx.sessions.load(request.cookies.get(SESSION_COOKIE))
    if found is None:
        return None
    key = ctx.key_of(found.kid)  # None: the key was removed, lost its review scope, or the secret changed
    return None if key is None else (key, found.csrf)


def _key(request: Request, ctx: ReviewContext, given: str) -> ApiKey:
    """The review key ``given`` (:func:`authenticate`: one failure count per address with the API's keys).

    Raises:
        HTTPException: 401 wrong key, 403 no review scope, 429 (with ``Retry-After``) too many failures.
    """
    try:
        return authenticate(request, ctx.settings, ctx.throttle, given, REVIEW)
    except Throttled as exc:
        raise HTTPException(429, str(exc), headers={"Retry-After": str(retry_after(exc.seconds))}) from None
    except ScopeError:
        raise HTTPException(403, "this API key has no review scope; ask for a key with the review scope") from None
    except AuthError:
        raise HTTPException(401, "missing or wrong API key; send a key with the review scope in X-API-Key") from None


def _reviewer(request: Request, ctx: ReviewContext, api_key: str | None, csrf: str | None, change: bool) -> ApiKey:
    """The reviewer behind a request: its ``X-API-Key``, else its session (with the CSRF token for a change)."""
    if api_key is not None:
        return _key(request, ctx, api_key)
    found = _session(request, ctx)
    if found is None:
        raise HTTPException(401, f"log in at {REVIEW_ROOT}/login, or send a key with the review scope in X-API-Key")
    key, token = found
    if change and not same_token(csrf, token):
        raise HTTPException(403, f"missing or wrong CSRF token: send the page's token in {CSRF_HEADER}")
    return key


async def _form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body's fields (first value of each)."""
    try:
        fields = parse_qs((await request.body()).decode("utf-8"), max_num_fields=8, keep_blank_values=True)
    except (UnicodeDecodeError, ValueError) as exc:
        raise HTTPException(400, "send the form as UTF-8 application/x-www-form-urlencoded") from exc
    return {k: v[0] for k, v in fields.items()}


@router.get("", include_in_schema=False)
def review_page(
    request: Request,
    ctx: Context,
    index: str | None = None,
    min_probability: Annotated[float | None, Query(ge=0.0, le=1.0)] = None,
    page: Annotated[int, Query(ge=1)] = 1,
    size: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = 20,
) -> Response:
    """The flagged pairs, newest first; the login form first when there is no session."""
    found = _session(request, ctx)
    if found is None:
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"{REVIEW_ROOT}/login?next={quote(here, safe='')}", status_code=303)
    key, csrf = found
    filters = Filters(index or None, min_probability, page, size)
    try:
        view = page_view(ctx, key, filters)
    except LookupError:
        return _html(ctx, "error.html", 404, message=f"no index {index!r} among those you may review")
    except ConfigError as exc:
        return _html(ctx, "error.html", 422, message=str(exc))
    return _html(ctx, "review.html", csrf=csrf, **view)


@router.get("/login", include_in_schema=False)
def login_form(request: Request, ctx: Context, next: str | None = None) -> Response:
    """The login form, with a fresh double-submit token (a cookie and a hidden field that must agree)."""
    token = new_token()
    resp = _html(ctx, "login.html", next=safe_next(next), csrf=token, error=None)
    resp.set_cookie(
        LOGIN_COOKIE, token, max_age=3600, path=f"{REVIEW_ROOT}/login", secure=_secure(request), httponly=True,
        samesite="strict",
    )  # fmt: skip
    return resp


@router.post("/login", include_in_schema=False)
async def login(request: Request, ctx: Context) -> Response:
    """Check the key; on success set the session cookie and go to ``next`` (a local path under /review only)."""
    form = await _form(request)
    # the key check and the session store are blocking calls (SQLite, the cluster): on a thread, not the loop
    return await run_in_threadpool(_login, request, ctx, form)


def _login(request: Request, ctx: ReviewContext, form: dict[str, str]) -> Response:
    target = safe_next(form.get("next"))

    def again(status: int, error: str, headers: dict[str, str] | None = None) -> Response:
        token = new_token()
        resp = _html(ctx, "login.html", status, next=target, csrf=token, error=error)
        resp.set_cookie(
            LOGIN_COOKIE, token, max_age=3600, path=f"{REVIEW_ROOT}/login", secure=_secure(request), httponly=True,
            samesite="strict",
        )  # fmt: skip
        resp.headers.update(headers or {})
        return resp

    if not same_token(form.get("csrf"), request.cookies.get(LOGIN_COOKIE)):
        return again(403, "The login form expired or did not come from this page; log in again.")
    try:
        key = _key(request, ctx, form.get("key", ""))
    except HTTPException as exc:
        said = {
            429: "Too many wrong keys from this address; wait a while, then log in.",
            403: "This key may not review: it has no review scope.",
        }
        return again(exc.status_code, said.get(exc.status_code, "Wrong key."), exc.headers)
    sid, _ = ctx.sessions.create(key_id(ctx.secret, key.key), key.who)
    resp = RedirectResponse(target, status_code=303)
    resp.set_cookie(
        SESSION_COOKIE, sid, max_age=ctx.settings.review.session_max_age, path=REVIEW_ROOT, secure=_secure(request),
        httponly=True, samesite="strict",
    )  # fmt: skip
    resp.delete_cookie(LOGIN_COOKIE, path=f"{REVIEW_ROOT}/login")
    logger.info("reviewer %s logged in", key.who)
    return resp


@router.post("/logout", include_in_schema=False)
async def logout(request: Request, ctx: Context) -> Response:
    """End the session, here and in every worker and replica (the form carries the session's CSRF token)."""
    form = await _form(request)
    return await run_in_threadpool(_logout, request, ctx, form)


def _logout(request: Request, ctx: ReviewContext, form: dict[str, str]) -> Response:
    found = _session(request, ctx)
    if found is not None and not same_token(form.get("csrf"), found[1]):
        raise HTTPException(403, "missing or wrong CSRF token")
    ctx.sessions.end(request.cookies.get(SESSION_COOKIE))
    resp = RedirectResponse(f"{REVIEW_ROOT}/login", status_code=303)
    resp.delete_cookie(SESSION_COOKIE, path=REVIEW_ROOT)
    return resp


@router.post(
    "/api/verdicts",
    response_model=VerdictOut,
    responses={401: {"description": "No key or session"}, 403: {"description": "No review scope, or bad CSRF"}},
)
def post_verdict(
    body: VerdictIn,
    request: Request,
    ctx: Context,
    x_api_key: Annotated[str | None, Header(alias="X-API-Key")] = None,
    x_csrf_token: Annotated[str | None, Header(alias=CSRF_HEADER)] = None,
    query: NO_QUERY = None,
) -> dict[str, Any]:
    """Record a verdict on a flagged pair (the same verdict again changes nothing; an unknown query parameter gets
    422, as on every POST endpoint of the API)."""
    key = _reviewer(request, ctx, x_api_key, x_csrf_token, change=True)
    if body.index not in ctx.settings.review_indices(key):
        raise HTTPException(404, _NOT_FLAGGED)
    flag = get_flag(ctx.client, body.index, body.post_id, body.candidate_id, store=ctx.flags_store)
    if flag is None:
        raise HTTPException(404, _NOT_FLAGGED)
    done = record_verdict(ctx.client, flag, body.verdict, key.who, store=ctx.verdicts_store)
    logger.info(
        "verdict %s on %s/%s by %s (%s)",
        body.verdict,
        body.post_id[:64],
        body.candidate_id[:64],
        key.who,
        "new" if done.changed else "replay",
    )
    return {"verdict": done.verdict.to_json(), "changed": done.changed}


@router.get("/api/verdicts.jsonl", response_class=StreamingResponse)
def download_verdicts(
    request: Request,
    ctx: Context,
    index: str,
    x_api_key: Annotated[str | None, Header(alias="X-API-Key")] = None,
) -> Response:
    """The judged pairs of ``index`` as labelled JSONL (one line per pair, the reviewers' majority)."""
    key = _reviewer(request, ctx, x_api_key, None, change=False)
    if index not in ctx.settings.review_indices(key):
        raise HTTPException(404, _NOT_FLAGGED)
    lines = export_pairs(ctx.client, index, store=ctx.verdicts_store)
    first = next(lines, None)  # the cluster's errors answer here, before the response starts
    return StreamingResponse(
        chain([first] if first is not None else [], lines),
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="verdicts-{index}.jsonl"', "Cache-Control": "no-store"},
    )


@router.get("/static/{name}", include_in_schema=False)
def static(name: str) -> Response:
    """The page's script or style sheet, from the package."""
    if name not in _STATIC:
        raise HTTPException(404, "no such file")
    data = resources.files("semdup.review").joinpath("static", name).read_bytes()
    return Response(data, media_type=_STATIC[name], headers={**_HEADERS, "Cache-Control": "max-age=300"})
