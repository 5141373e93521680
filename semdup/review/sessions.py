"""The review page's login sessions: server-side, ended by logout and by the key's removal; CSRF tokens; ``next``.

A reviewer logs in once with an API key holding the ``review`` scope; the page then carries a cookie holding only a
random session id (32 bytes). The session itself is a document of ``semdup-sessions``
(:data:`~semdup.index_format.system_indices.SESSIONS`) whose ``_id`` is the SHA-256 of that id: ``kid`` (the key
by an HMAC of it under ``SEMDUP_SESSION_SECRET``, :func:`key_id`, never the key), ``owner`` (the service that made
it, :func:`owner_id`: an HMAC under the same secret, never the secret), the session's CSRF token, when it was made
and when last used, and its lifetimes (``idle``, ``max_age``) with the moment they end it (``expires``). Why the
cluster: every worker process of a service, every replica, and the service after a restart read the same sessions,
and logging out in one ends the session in all of them (a signed cookie alone could not be ended: a copy kept
working until it expired).

A session belongs to the service that made it. Several services (other sites, other secrets) may keep their
sessions in one cluster's ``semdup-sessions``; each reads, touches, ends and purges only its own (the same
``owner``, so the same session secret: the workers and replicas of one service), and a session lasts as long as
the lifetimes it was made with say, whichever service reads it. Before, a login purged every session its own
lifetimes called expired, and a logout without a CSRF token at another service deleted a session that service
could not even read (issue #34).

A session is refused when its document is gone (logout, :meth:`SessionStore.end`), when it is another service's
(or was made before sessions had owners), when it is older than its ``max_age`` (``SEMDUP_SESSION_MAX_AGE`` when it
was made) or unused for its ``idle`` seconds (``SEMDUP_SESSION_IDLE``), and, by the router, when its key is no
longer a review key of the service (removed from ``SEMDUP_API_KEYS``). The cookie is ``HttpOnly``,
``SameSite=Strict``, ``Path=/review``, and ``Secure`` over TLS.

Every state change (a verdict, logging out) must carry the session's ``csrf`` token (header ``X-CSRF-Token`` or
form field ``csrf``), compared in constant time; the login form has its own double-submit token, so nobody can log
a browser in under their key either.

    store = SessionStore(client, idle=1800, max_age=28800, owner=owner_id(secret))
    sid, session = store.create(key_id(secret, key), who="alice")   # sid goes in the cookie
    store.load(sid)    # -> the Session, or None when unknown, another service's, ended or expired
    store.end(sid)     # only one of this service's
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import time
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from semdup.index_format.system_indices import SESSIONS, ensure

__all__ = [
    "SessionStore",
    "Session",
    "key_id",
    "owner_id",
    "new_token",
    "same_token",
    "safe_next",
    "REVIEW_ROOT",
    "LONGEST_SESSION_S",
]

logger = logging.getLogger(__name__)

REVIEW_ROOT = "/review"
_SID = re.compile(r"[A-Za-z0-9_-]{43}")  # what new_token() makes: 32 bytes, URL-safe base64 without padding
_TOUCH_EVERY_S = 60  # a session's last use is written at most this often (not on every request)
LONGEST_SESSION_S = 30 * 86400  # the longest SEMDUP_SESSION_MAX_AGE: a session made before owners is dead after it
_OWNER_LABEL = b"semdup review sessions owner"


def new_token() -> str:
    """32 random bytes, URL-safe: a CSRF token."""
    return secrets.token_urlsafe(32)


def same_token(given: str | None, expected: str | None) -> bool:
    """Constant-time comparison; a missing token on either side never matches."""
    if not given or not expected:
        return False
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def key_id(secret: str, key: str) -> str:
    """The name a session gives its key: HMAC-SHA256 of the key under the session secret (hex, 32 digits)."""
    return hmac.new(secret.encode("utf-8"), key.encode("utf-8"), hashlib.sha256).hexdigest()[:32]


def owner_id(secret: str) -> str:
    """The name a service gives the sessions it makes: HMAC-SHA256 of a fixed label under the session secret (hex,
    32 digits). Services with one secret (the workers and replicas of one service) share their sessions; the
    secret cannot be read back from it."""
    return hmac.new(secret.encode("utf-8"), _OWNER_LABEL, hashlib.sha256).hexdigest()[:32]


@dataclass(frozen=True)
class Session:
    """One login: the key it was made with (:func:`key_id`), its CSRF token, when it was made and last used, and the
    lifetimes it was made with (seconds unused, seconds in all)."""

    kid: str
    csrf: str
    created: int
    seen: int
    idle: int
    max_age: int

    def __repr__(self) -> str:
        return f"Session(kid={self.kid[:8]}..., created={self.created}, seen={self.seen})"

    @property
    def expires(self) -> int:
        """When it ends unless used again (epoch seconds)."""
        return min(self.created + self.max_age, self.seen + self.idle)

    def over(self, now: int) -> bool:
        """Whether it has ended at ``now`` (or was made in the future by more than a minute: a forged document)."""
        return now - self.created > self.max_age or now - self.seen > self.idle or self.created > now + 60


class SessionStore:
    """The review sessions of one service in ``index`` (default ``semdup-sessions``) in the cluster (module
    docstring).

    Args:
        client: an OpenSearch client (its timeout applies to every call).
        idle: seconds a session made here lasts unused.
        max_age: seconds a session made here lasts after login, used or not.
        owner: this service's name for its sessions (:func:`owner_id` of its session secret).
    """

    def __init__(self, client: Any, idle: int, max_age: int, *, owner: str, index: str = SESSIONS.name) -> None:
        if not 0 < idle <= max_age:
            raise ValueError(f"0 < idle <= max_age is needed; got idle {idle}, max_age {max_age}")
        if not owner:
            raise ValueError("a session store needs its service's owner id (owner_id(session_secret))")
        self.client, self.idle, self.max_age, self.index = client, int(idle), int(max_age), index
        self.owner = owner

    def __repr__(self) -> str:
        return f"SessionStore(index={self.index!r}, idle={self.idle}, max_age={self.max_age})"

    @staticmethod
    def _doc_id(sid: str) -> str:
        return hashlib.sha256(sid.encode("ascii")).hexdigest()

    def create(self, kid: str, who: str, now: float | None = None) -> tuple[str, Session]:
        """A new session for the key ``kid`` (``who``: the reviewer's name, for the operator), with this store's
        lifetimes; returns its id (the cookie's value) and the session. This service's expired sessions are removed
        on the way.

        Raises:
            OpenSearchUnavailable: the cluster did not answer.
        """
        at = int(time.time() if now is None else now)
        sid, session = new_token(), Session(kid, new_token(), at, at, self.idle, self.max_age)
        body = {
            "kid": kid,
            "who": who,
            "csrf": session.csrf,
            "owner": self.owner,
            "created": at,
            "seen": at,
            "idle": session.idle,
            "max_age": session.max_age,
            "expires": session.expires,
        }
        ensure(self.client, SESSIONS, self.index)
        self.client.index(index=self.index, id=self._doc_id(sid), body=body)
        self._purge(at)
        return sid, session

    def _own(self, sid: str | None) -> tuple[str, Session] | None:
        """(document id, session) of ``sid`` when it is one of this service's, in any state, else None."""
        if not sid or not _SID.fullmatch(sid):
            return None
        doc_id = self._doc_id(sid)
        # 404: no such session, or none was ever stored (ignored: the client would log each as a warning)
        found = self.client.get(index=self.index, id=doc_id, ignore=[404])
        src = (found.get("_source") or {}) if found.get("found") else {}
        if not isinstance(src.get("owner"), str) or not hmac.compare_digest(src["owner"], self.owner):
            return None  # unknown, another service's, or made before sessions had owners
        try:
            fields = ("created", "seen", "idle", "max_age")
            created, seen, idle, max_age = (int(src[name]) for name in fields)
            return doc_id, Session(str(src["kid"]), str(src["csrf"]), created, seen, idle, max_age)
        except (KeyError, TypeError, ValueError):
            return None

    def load(self, sid: str | None, now: float | None = None) -> Session | None:
        """The live session ``sid`` names, else None (unknown, another service's, ended, or over by the lifetimes it
        was made with: an expired one of this service's is removed). Its last use is recorded (at most once a
        minute).

        Raises:
            OpenSearchUnavailable: the cluster did not answer.
        """
        found = self._own(sid)
        if found is None:
            return None
        at = int(time.time() if now is None else now)
        doc_id, session = found
        if session.over(at):
            self.client.delete(index=self.index, id=doc_id, ignore=[404])
            return None
        if at - session.seen >= min(_TOUCH_EVERY_S, session.idle // 10):
            session = replace(session, seen=at)
            touch = {"doc": {"seen": at, "expires": session.expires}}
            self.client.update(index=self.index, id=doc_id, body=touch, ignore=[404, 409])
        return session

    def end(self, sid: str | None) -> None:
        """End the session ``sid`` (logout) when it is one of this service's; an unknown one, or another service's,
        is left as it is.

        Raises:
            OpenSearchUnavailable: the cluster did not answer.
        """
        found = self._own(sid)
        if found is not None:
            self.client.delete(index=self.index, id=found[0], ignore=[404])

    def _purge(self, now: int) -> None:
        """Remove this service's sessions that are over by their own lifetimes, and those made before sessions had
        owners once no lifetime can keep them (at each login: logins are rare, and the index stays small)."""
        query = {
            "query": {
                "bool": {
                    "should": [
                        {"bool": {"filter": [{"term": {"owner": self.owner}}, {"range": {"expires": {"lt": now}}}]}},
                        {
                            "bool": {
                                "must_not": [{"exists": {"field": "owner"}}],
                                "filter": [{"range": {"created": {"lt": now - LONGEST_SESSION_S}}}],
                            }
                        },
                    ],
                    "minimum_should_match": 1,
                }
            }
        }
        try:
            self.client.delete_by_query(index=self.index, body=query, conflicts="proceed")
        except Exception as exc:  # the login itself worked: the next one tries again
            logger.warning("could not remove expired review sessions from %s: %s", self.index, exc)


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
