"""Who gets in at /review, with the router alone on a bare FastAPI app (no cluster: a client that holds nothing).

A key without the review scope gets 403, a wrong or missing key 401; a state change needs the session's CSRF
token; a pair that is not flagged gets 404; ``next`` never leads off the review page.
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from opensearchpy import exceptions as os_exc
from session_cluster import DictCluster
from settings_tree import service_settings

from semdup.core.settings import OpenSearchSettings
from semdup.opensearch_io.boundary import client_error
from semdup.review.context import review_context
from semdup.review.router import LOGIN_COOKIE, SESSION_COOKIE, router
from semdup.review.sessions import SessionStore, owner_id

SEARCH_KEY, REVIEW_KEY = "search-key-0001-7d2f0c9e4b1a", "review-key-0002-7d2f0c9e4b1a"
OTHER_REVIEW_KEY = "review-key-0003-5c9e1a7b3d0f"


class EmptyCluster:
    """An OpenSearch client over a cluster with no semdup store yet; records the document reads."""

    def __init__(self) -> None:
        self.gets: list[str] = []
        self.indices = SimpleNamespace(exists=lambda **_: False)

    def get(self, index: str, id: str, **_: Any) -> dict[str, Any]:
        self.gets.append(id)
        raise client_error(os_exc.NotFoundError(404, "not_found", {"found": False}), "GET", f"/{index}/_doc/{id}")


def make_app(
    api_keys: str = f"{SEARCH_KEY}:travel,{REVIEW_KEY}:travel:review:alice",
    sessions: DictCluster | None = None,
    **values: str,
) -> tuple[TestClient, Any]:
    settings = service_settings(
        {
            "bundle": "b",
            "index": "travel",
            "indices": "travel,cooking",
            "api_keys": api_keys,
            "session_secret": "z" * 40,
            **values,
        },
        OpenSearchSettings(url="http://127.0.0.1:9"),
    )
    app = FastAPI()
    app.include_router(router)
    cluster = EmptyCluster()
    store = SessionStore(sessions or DictCluster(), 600, 3600, owner=owner_id("z" * 40))
    app.state.review = review_context(settings, cluster, "m-1", sessions=store)
    return TestClient(app, follow_redirects=False), cluster


def login(client: TestClient, key: str, next_: str = "/review") -> Any:
    form = client.get("/review/login")
    token = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)
    return client.post("/review/login", data={"key": key, "csrf": token, "next": next_})


def page_csrf(client: TestClient) -> str:
    page = client.get("/review")
    assert page.status_code == 200, page.text
    return re.search(r'<meta name="csrf-token" content="([^"]+)">', page.text).group(1)


VERDICT = {"index": "travel", "post_id": "812", "candidate_id": "87", "verdict": "duplicate"}


def test_the_page_asks_for_a_login_and_sends_strict_headers() -> None:
    client, _ = make_app()
    r = client.get("/review?index=travel")
    assert r.status_code == 303 and r.headers["location"] == "/review/login?next=%2Freview%3Findex%3Dtravel"
    form = client.get("/review/login?next=/review%3Findex%3Dtravel")
    assert form.status_code == 200 and "script-src 'self'" in form.headers["content-security-policy"]
    assert form.headers["x-frame-options"] == "DENY" and form.headers["x-content-type-options"] == "nosniff"
    assert 'value="/review?index=travel"' in form.text
    cookie = form.headers["set-cookie"]
    assert LOGIN_COOKIE in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie


def test_a_login_sets_an_httponly_strict_cookie_and_next_never_leaves_the_review_page() -> None:
    client, _ = make_app()
    r = login(client, REVIEW_KEY, "https://evil.example")
    assert r.status_code == 303 and r.headers["location"] == "/review"
    cookie = next(c for c in r.headers.get_list("set-cookie") if c.startswith(SESSION_COOKIE))
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/review" in cookie
    assert "Secure" not in cookie  # served over plain HTTP here; over TLS the cookie is Secure
    assert REVIEW_KEY not in cookie
    for evil in ("//evil.example/review", "/\\evil.example", "javascript:alert(1)"):
        assert login(client, REVIEW_KEY, evil).headers["location"] == "/review"
    assert (
        login(client, REVIEW_KEY, "/review?index=cooking&page=2").headers["location"] == "/review?index=cooking&page=2"
    )


def test_a_key_without_the_review_scope_gets_403_and_a_wrong_one_401() -> None:
    client, _ = make_app()
    assert login(client, SEARCH_KEY).status_code == 403
    assert login(client, "no-such-key").status_code == 401
    assert SESSION_COOKIE not in client.cookies
    assert client.post("/review/api/verdicts", json=VERDICT, headers={"X-API-Key": SEARCH_KEY}).status_code == 403
    assert client.post("/review/api/verdicts", json=VERDICT, headers={"X-API-Key": "nope"}).status_code == 401
    assert client.post("/review/api/verdicts", json=VERDICT).status_code == 401
    assert client.get("/review/api/verdicts.jsonl?index=travel", headers={"X-API-Key": SEARCH_KEY}).status_code == 403


def test_a_login_form_without_its_own_token_is_refused() -> None:
    client, _ = make_app()
    client.get("/review/login")
    assert client.post("/review/login", data={"key": REVIEW_KEY, "csrf": "forged"}).status_code == 403
    assert client.post("/review/login", data={"key": REVIEW_KEY}).status_code == 403


def test_a_session_change_needs_the_csrf_token() -> None:
    client, cluster = make_app()
    login(client, REVIEW_KEY)
    token = page_csrf(client)
    assert client.post("/review/api/verdicts", json=VERDICT).status_code == 403  # missing
    assert client.post("/review/api/verdicts", json=VERDICT, headers={"X-CSRF-Token": "x" + token}).status_code == 403
    assert cluster.gets == []  # refused before any read
    r = client.post("/review/api/verdicts", json=VERDICT, headers={"X-CSRF-Token": token})
    assert r.status_code == 404 and len(cluster.gets) == 1  # the token was right: the pair is not flagged
    assert client.post("/review/logout", data={"csrf": "wrong"}).status_code == 403
    assert client.post("/review/logout", data={"csrf": token}).status_code == 303
    assert client.get("/review").status_code == 303  # logged out


def test_a_pair_that_is_not_flagged_or_not_reviewable_gets_the_same_404() -> None:
    client, cluster = make_app(f"{REVIEW_KEY}:travel:review:alice")
    headers = {"X-API-Key": REVIEW_KEY}
    not_flagged = client.post("/review/api/verdicts", json=VERDICT, headers=headers)
    other_index = client.post("/review/api/verdicts", json={**VERDICT, "index": "cooking"}, headers=headers)
    assert not_flagged.status_code == other_index.status_code == 404
    assert not_flagged.json() == other_index.json()
    assert len(cluster.gets) == 1  # the index it may not review is never read
    bad = client.post("/review/api/verdicts", json={**VERDICT, "verdict": "maybe"}, headers=headers)
    assert bad.status_code == 422


@pytest.mark.parametrize("keys", [f"{SEARCH_KEY}:travel", f"{SEARCH_KEY}:travel:search"])
def test_the_page_is_off_without_a_review_key(keys: str) -> None:
    client, _ = make_app(keys)
    r = client.get("/review/login")
    assert r.status_code == 404 and "review scope" in r.json()["detail"]


def test_a_copied_cookie_is_refused_after_logout_and_after_its_key_is_removed() -> None:
    shared = DictCluster()  # the sessions every worker and replica reads
    client, _ = make_app(sessions=shared)
    login(client, REVIEW_KEY)
    copied = client.cookies[SESSION_COOKIE]
    token = page_csrf(client)
    assert client.post("/review/logout", data={"csrf": token}).status_code == 303
    thief, _ = make_app(sessions=shared)  # another worker, the copied cookie replayed
    thief.cookies.set(SESSION_COOKIE, copied, path="/review")
    assert thief.get("/review").status_code == 303  # to the login form
    r = thief.post("/review/api/verdicts", json=VERDICT, headers={"X-CSRF-Token": token})
    assert r.status_code == 401 and "log in" in r.json()["detail"]

    login(client, REVIEW_KEY)
    kept = client.cookies[SESSION_COOKIE]
    restarted, _ = make_app(f"{SEARCH_KEY}:travel,{OTHER_REVIEW_KEY}:travel:review:bob", sessions=shared)
    restarted.cookies.set(SESSION_COOKIE, kept, path="/review")
    assert restarted.get("/review").status_code == 303  # the key is no longer one of the service's
    same, _ = make_app(sessions=shared)  # the same keys after a restart: the session holds
    same.cookies.set(SESSION_COOKIE, kept, path="/review")
    assert same.get("/review").status_code == 200


def test_wrong_logins_and_keys_share_one_count_per_address_then_429_with_retry_after() -> None:
    client, _ = make_app(auth_failures="3", auth_window="60", auth_block="30")
    assert login(client, "wrong-key-1").status_code == 401
    assert client.post("/review/api/verdicts", json=VERDICT, headers={"X-API-Key": "wrong-key-2"}).status_code == 401
    third = login(client, "wrong-key-3")  # the third failure starts the block
    assert third.status_code == 429 and third.headers["retry-after"] == "30" and "Too many" in third.text
    right = login(client, REVIEW_KEY)  # a right key waits too: else a 429 would tell the guesser which was right
    assert right.status_code == 429 and SESSION_COOKIE not in client.cookies
    api = client.post("/review/api/verdicts", json=VERDICT, headers={"X-API-Key": REVIEW_KEY})
    assert api.status_code == 429 and 1 <= int(api.headers["retry-after"]) <= 30
    assert login(client, SEARCH_KEY).status_code == 429
