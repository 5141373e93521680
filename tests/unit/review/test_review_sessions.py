"""The review page's sessions (server-side: logout, idle and absolute lifetimes end them), CSRF tokens and the
login's ``next``: forged, stale and foreign values refused. The store runs on a dict-backed fake of the client
calls it makes; tests/integration/test_serve_keys.py runs it on a real cluster and real `semdup serve`s (two
services on one cluster, each ending only its own sessions)."""

from __future__ import annotations

import hashlib

import pytest
from session_cluster import DictCluster

from semdup.review.sessions import SessionStore, key_id, new_token, owner_id, safe_next, same_token

SECRET = "s" * 40
OWNER = owner_id(SECRET)


def test_a_session_lives_until_logout_and_the_cookie_holds_only_a_random_id() -> None:
    cluster = DictCluster()
    store = SessionStore(cluster, idle=600, max_age=3600, owner=OWNER)
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
    store = SessionStore(cluster, idle=600, max_age=3600, owner=OWNER)
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
    store.create("kid", "carol", now=20_000 + 601)  # a login removes this service's other expired sessions
    assert store.load(old, now=20_000 + 601) is None and len(cluster.docs) == 1


def test_junk_and_foreign_ids_are_refused_without_a_lookup() -> None:
    cluster = DictCluster()
    store = SessionStore(cluster, idle=600, max_age=3600, owner=OWNER)
    for junk in (None, "", "abc", "a.b", "!" * 43, "x" * 5000, new_token() + "x"):
        assert store.load(junk, now=1000) is None
    assert cluster.gets == 0
    assert store.load(new_token(), now=1000) is None and cluster.gets == 1  # well-formed, unknown
    with pytest.raises(ValueError):
        SessionStore(cluster, idle=7200, max_age=3600, owner=OWNER)


def test_a_service_reads_ends_and_purges_only_its_own_sessions_by_the_lifetimes_they_were_made_with() -> None:
    """Issue #34: two services (two secrets) on one cluster; the one with the short lifetimes neither purges nor
    ends the other's sessions, and a session lasts as long as the lifetimes it was made with say."""
    cluster = DictCluster()
    mine = SessionStore(cluster, idle=1800, max_age=8 * 3600, owner=OWNER)
    theirs = SessionStore(cluster, idle=60, max_age=120, owner=owner_id("o" * 40))
    kept, _ = mine.create("kid", "alice", now=1000)
    short, _ = theirs.create("kid", "bob", now=1000)
    assert SECRET not in str(cluster.docs) and OWNER in str(cluster.docs)  # the owner's id, never the secret
    theirs.create("kid", "carol", now=1000 + 61)  # their login purges their expired sessions only
    assert theirs.load(short, now=1000 + 61) is None
    assert mine.load(kept, now=1000 + 61) is not None  # 61 s unused: live by the 30-min idle it was made with
    assert theirs.load(kept, now=1000 + 62) is None  # another service's session: not theirs to read
    theirs.end(kept)  # a logout at the other service (e.g. without a CSRF token): not theirs to end
    assert mine.load(kept, now=1000 + 63) is not None
    later = SessionStore(cluster, idle=1800, max_age=8 * 3600, owner=owner_id("o" * 40))  # theirs, restarted
    made, _ = theirs.create("kid", "dave", now=5000)
    assert later.load(made, now=5000 + 121) is None  # its 120 s maximum age, not the reader's 8 hours
    legacy = {"kid": "kid", "who": "eve", "csrf": "t", "created": 1000, "seen": 1000}  # made before owners
    cluster.docs["legacy"] = legacy
    mine.create("kid", "frank", now=2000)
    assert "legacy" in cluster.docs  # another version's running service may still use it
    mine.create("kid", "grace", now=1000 + 30 * 86400 + 1)
    assert "legacy" not in cluster.docs  # past the longest lifetime any service may set


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
