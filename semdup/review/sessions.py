"""The review page's login session: a signed cookie, a per-session CSRF token, and where a login may lead.

A reviewer logs in once with an API key holding the ``review`` scope; the page then carries a cookie holding
``{"kid", "csrf", "iat"}``, signed with HMAC-SHA256 under ``SEMDUP_SESSION_SECRET``. ``kid`` names the key by an
HMAC of it under the same secret (never the key itself), so a key removed from ``SEMDUP_API_KEYS`` ends its
sessions at the next start, and a cookie read by someone else tells nothing about the key. The cookie is
``HttpOnly``, ``SameSite=Strict``, ``Path=/review``, and ``Secure`` when the page is served over TLS.

Every state change (a verdict, logging out) must carry the session's ``csrf`` token (header ``X-CSRF-Token`` or
form field ``csrf``), compared in constant time; the login form has its own double-submit token, so nobody can log
a browser in under their key either.

    signer = SessionSigner(secret, max_age=43200)
    cookie = signer.dumps({"kid": key_id(secret, key), "csrf": new_token()})
    signer.loads(cookie)   # -> the dict, or None when forged, damaged or older than max_age
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from typing import Any
from urllib.parse import urlsplit

__all__ = ["SessionSigner", "key_id", "new_token", "same_token", "safe_next", "REVIEW_ROOT"]

REVIEW_ROOT = "/review"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def new_token() -> str:
    """32 random bytes, URL-safe: a CSRF token."""
    return secrets.token_urlsafe(32)


def same_token(given: str | None, expected: str | None) -> bool:
    """Constant-time comparison; a missing token on either side never matches."""
    if not given or not expected:
        return False
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def key_id(secret: str, key: str) -> str:
    """The name a session cookie gives a key: HMAC-SHA256 of the key under the session secret (hex, 32 digits)."""
    return hmac.new(secret.encode("utf-8"), key.encode("utf-8"), hashlib.sha256).hexdigest()[:32]


class SessionSigner:
    """Signs and checks session cookies: ``base64url(json) . base64url(HMAC-SHA256(secret, json))``.

    Args:
        secret: at least 32 characters (``SEMDUP_SESSION_SECRET``); never logged.
        max_age: seconds a session lasts after login.
    """

    def __init__(self, secret: str, max_age: int) -> None:
        if len(secret) < 32:
            raise ValueError("the session secret must hold at least 32 characters")
        self._key = hashlib.sha256(b"semdup-review-session\x00" + secret.encode("utf-8")).digest()
        self.max_age = int(max_age)

    def __repr__(self) -> str:
        return f"SessionSigner(secret='***', max_age={self.max_age})"

    def _sign(self, payload: bytes) -> str:
        return _b64(hmac.new(self._key, payload, hashlib.sha256).digest())

    def dumps(self, data: dict[str, Any], now: float | None = None) -> str:
        """The cookie value for ``data`` (JSON-native values), stamped with the time of issue."""
        payload = json.dumps({**data, "iat": int(now if now is not None else time.time())}, sort_keys=True)
        raw = payload.encode("utf-8")
        return f"{_b64(raw)}.{self._sign(raw)}"

    def loads(self, value: str | None, now: float | None = None) -> dict[str, Any] | None:
        """The data of a cookie this signer made less than ``max_age`` seconds ago, else None (forged, damaged,
        expired, issued in the future)."""
        if not value or value.count(".") != 1 or len(value) > 4096:
            return None
        body, sig = value.split(".")
        try:
            raw = _unb64(body)
        except (ValueError, TypeError):
            return None
        if not hmac.compare_digest(sig, self._sign(raw)):
            return None
        try:
            data = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("iat"), int):
            return None
        age = (now if now is not None else time.time()) - data["iat"]
        if not -60 <= age <= self.max_age:  # a minute of clock skew between workers
            return None
        return data


def safe_next(value: str | None) -> str:
    """Where a login may lead: a local path under ``/review`` (query kept), else ``/review``.

    Refused: anything with a scheme or host (``https://evil.example``, ``//evil.example``), backslashes (which
    browsers read as slashes), control characters, and paths outside the review page.
    """
    if not value or len(value) > 2000 or "\\" in value or any(ord(c) < 32 or ord(c) == 127 for c in value):
        return REVIEW_ROOT
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or not value.startswith("/") or value.startswith("//"):
        return REVIEW_ROOT
    path = parts.path
    if path != REVIEW_ROOT and not path.startswith(REVIEW_ROOT + "/") and not path.startswith(REVIEW_ROOT + "?"):
        return REVIEW_ROOT
    if "/.." in path or "/./" in path or "%2e" in path.lower() or "%2f" in path.lower():  # no way out by dots
        return REVIEW_ROOT
    return path + (f"?{parts.query}" if parts.query else "")
