"""The review page's session cookie, CSRF tokens and the login's ``next``: forged, stale and foreign values refused."""

from __future__ import annotations

import pytest

from semdup.review.sessions import SessionSigner, key_id, new_token, safe_next, same_token

SECRET = "s" * 40


def test_a_signed_session_reads_back_and_a_forged_or_stale_one_does_not() -> None:
    signer = SessionSigner(SECRET, max_age=3600)
    cookie = signer.dumps({"kid": "abc", "csrf": "t"}, now=1000)
    assert signer.loads(cookie, now=1500) == {"kid": "abc", "csrf": "t", "iat": 1000}
    assert signer.loads(cookie, now=1000 + 3601) is None  # expired
    assert signer.loads(cookie, now=500) is None  # issued in the future (beyond a minute of skew)
    body, sig = cookie.split(".")
    assert signer.loads(f"{body}.{sig[:-2]}AA", now=1500) is None  # damaged signature
    other = SessionSigner("o" * 40, max_age=3600).dumps({"kid": "abc", "csrf": "t"}, now=1000)
    assert signer.loads(other, now=1500) is None  # another secret's cookie
    forged_body = SessionSigner("o" * 40, max_age=3600).dumps({"kid": "admin", "csrf": "t"}, now=1000).split(".")[0]
    assert signer.loads(f"{forged_body}.{sig}", now=1500) is None  # another body under this signature
    for junk in (None, "", "abc", "a.b.c", "!!!.???", "x" * 5000):
        assert signer.loads(junk, now=1500) is None


def test_the_secret_is_long_and_never_shown() -> None:
    with pytest.raises(ValueError):
        SessionSigner("short", max_age=60)
    assert SECRET not in repr(SessionSigner(SECRET, max_age=60))
    assert key_id(SECRET, "the-key") != key_id("o" * 40, "the-key")  # a cookie's key id is not the key's hash
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
