"""The review page's sessions (server-side: logout, idle and absolute lifetimes end them), CSRF tokens and the
login's ``next``: forged, stale and foreign values refused. The store runs on a dict-backed fake of the client
calls it makes; tests/integration/test_serve_keys.py runs it on a real cluster and a real `semdup serve`."""

from __future__ import annotations

import hashlib

import pytest
from session_cluster import DictCluster

from semdup.review.sessions import SessionStore, key_id, new_token, safe_next, same_token

SECRET = "s" * 40


def test_a_session_lives_until_logout_and_the_cookie_holds_only_a_random_id() -> None:
    cluster = DictCluster()
    store = SessionStore(cluster, idle=600, max_age=3600)
    sid, made = store.create(key_id(SECRET, "the-key"), "alice", now=1000)
    assert len(sid) == 43 and sid not in str(cluster.docs)  # stored under its hash, never as it is
    assert list(cluster.docs) == [hashlib.sha256(sid.encode()).hexdigest()]
    assert "the-key" not in str(cluster.docs) and cluster.docs[list(cluster.docs)[0]]["who"] == "alice"
    loaded = store.load(sid, now=1100)
    assert loaded is not None and loaded.kid == made.kid and same_token(made.csrf, loaded.csrf)
    store.end(sid)
    assert store.load(sid, now=1101) is None  # a copy of the cookie is worth nothing after logout
    store.end(sid)  # twice is fine


def test_idle_and_absolute_lifetimes_end_a_session() -> None:
    cluster = DictCluster()
    store = SessionStore(cluster, idle=600, max_age=3600)
    sid, _ = store.create("kid", "alice", now=1000)
    assert store.load(sid, now=1500) is not None  # used: its last use is recorded
    assert store.load(sid, now=2050) is not None  # 550 s after that use, not 1,050 after login
    assert store.load(sid, now=2651) is None  # unused for more than 600 s
    assert not cluster.docs  # an expired session is removed when seen
    sid, _ = store.create("kid", "alice", now=10_000)
    for t in range(10_000, 13_600, 500):
        assert store.load(sid, now=t) is not None
    assert store.load(sid, now=13_601) is None  # used all along, but older than max_age
    old, _ = store.create("kid", "bob", now=20_000)
    store.create("kid", "carol", now=20_000 + 601)  # a login removes the expired sessions of others
    assert store.load(old, now=20_000 + 601) is None and len(cluster.docs) == 1


def test_junk_and_foreign_ids_are_refused_without_a_lookup() -> None:
    cluster = DictCluster()
    store = SessionStore(cluster, idle=600, max_age=3600)
    for junk in (None, "", "abc", "a.b", "!" * 43, "x" * 5000, new_token() + "x"):
        assert store.load(junk, now=1000) is None
    assert cluster.gets == 0
    assert store.load(new_token(), now=1000) is None and cluster.gets == 1  # well-formed, unknown
    with pytest.raises(ValueError):
        SessionStore(cluster, idle=7200, max_age=3600)


def test_key_ids_depend_on_the_secret_and_never_show_the_key() -> None:
    assert key_id(SECRET, "the-key") != key_id("o" * 40, "the-key")  # a session's key id is not the key's hash
    assert "the-key" not in key_id(SECRET, "the-key")


def test_csrf_tokens_are_random_and_compared_whole() -> None:
    a, b = new_token(), new_token()
    assert a != b and len(a) >= 40
    assert same_token(a, a) and not same_token(a, b) and not same_token(a[:-1], a)
    assert not same_token(None, a) and not same_token(a, None) and not same_token("", "")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("/review?index=travel&page=2", "/review?index=travel&page=2"),
        ("/review/", "/review/"),
        ("https://evil.example", "/review"),
        ("https://evil.example/review", "/review"),
        ("//evil.example/review", "/review"),
        ("/\\evil.example", "/review"),
        ("\\\\evil.example", "/review"),
        ("javascript:alert(1)", "/review"),
        ("/review\r\nSet-Cookie: x=1", "/review"),
        ("/v1/rerank", "/review"),
        ("/reviewer", "/review"),
        ("/review/../v1/posts", "/review"),
        ("/review/%2e%2e/v1/posts", "/review"),
        ("/review%2F..%2Fv1", "/review"),
        ("review", "/review"),
        ("", "/review"),
        (None, "/review"),
    ],
)
def test_next_leads_only_to_a_local_review_path(given: str | None, expected: str) -> None:
    assert safe_next(given) == expected
