"""Settings of the HTTP service: the tree's ``service:`` and ``review:`` sections, declared once, here, as frozen
pydantic models (:class:`ServiceSection`, :class:`ReviewSection`), and what the HTTP app takes
(:class:`ServiceSettings`: the service section's fields with the other sections' parts it reads). No environment.

The composition root reads them, with every other setting, into one tree (:mod:`semdup.apps.settings`; the
variables are listed in ``docs/settings.md``) and hands :class:`ServiceSettings` to the HTTP app (its
:class:`~semdup.reranker.settings.RerankerSettings` inside).

Access (:class:`ApiKey`): a request names an ``index`` only from the allow-list ``SEMDUP_INDICES`` (plus
``SEMDUP_INDEX``), compared as exact strings, so patterns (``*``, ``_all``, ``a,b``), other indices and aliases
are never searched. ``SEMDUP_API_KEYS`` narrows it per key: comma-separated ``KEY:INDEX|INDEX`` entries, where
``KEY`` alone or ``KEY:*`` may search every served index; each named index must be served. A key that may not
search ``SEMDUP_INDEX`` searches its first index when a request names none::

    SEMDUP_INDEX=travel SEMDUP_INDICES=travel,cooking SEMDUP_API_KEYS='k1:travel,k2:cooking,k3:*'

An entry may go on with the key's scopes and a reviewer's name, ``KEY:INDICES:SCOPES[:NAME]``, scopes joined by
``|`` (:data:`SCOPES`):

- ``search``: read only, ``/v1/rerank`` and ``/v1/similar``; what an entry without scopes means, and the only key
  that may be put in a browser (``/examples/ask.html``);
- ``ingest``: ``/v1/posts``, ``/v1/posts/delete`` and ``/v1/posts/sync`` (before this scope existed, ``search``
  could write; ``semdup serve`` warns at start about keys that hold ``search`` but not ``ingest``,
  :meth:`ServiceSettings.startup_warnings`);
- ``review``: the review page and its verdicts (:mod:`semdup.review`);
- ``ops``: ``/metrics`` and ``/openapi.json`` while ``SEMDUP_OPS_AUTH`` is on (the default).

The name is recorded with the reviewer's verdicts (else ``key-`` and 8 hex digits of the key's SHA-256) and is the
key's label in messages (else ``entry N of SEMDUP_API_KEYS``). ``SEMDUP_API_KEY`` has the ``search`` scope only.
Every key holds at least :data:`MIN_KEY_CHARS` characters: a shorter one stops the service at start, naming its
label (``openssl rand -hex 24`` makes one)::

    SEMDUP_API_KEYS='k1...:travel,mod7...:travel:review:alice,site...:travel:search|ingest:site,prom...:*:ops:prom'

OpenSearch itself (URL, auth, TLS) is a :class:`semdup.core.settings.OpenSearchSettings`, the broker the ingest
endpoints send tasks to a :class:`~semdup.core.settings.BrokerSettings` (``SEMDUP_BROKER_URL``).
"""


from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from semdup.core.errors import ConfigError
from semdup.core.index_names import check_index_name
from semdup.core.post_rules import MAX_TEXT_CHARS
from semdup.core.settings import BrokerSettings, OpenSearchSettings
from semdup.ingest.sweeper import DEFAULT_SWEEP_AFTER
from semdup.reranker.settings import RerankerSettings, usable_cpus

__all__ = [
    "ServiceSection",
    "ReviewSection",
    "ServiceSettings",
    "ApiKey",
    "SCOPES",
    "SEARCH",
    "INGEST",
    "REVIEW",
    "OPS",
    "MIN_KEY_CHARS",
    "parse_api_keys",
    "api_keys_of",
    "default_workers",
]


SEARCH, INGEST, REVIEW, OPS = "search", "ingest", "review", "ops"
# what a key may do: search (rerank, similar: read only), ingest (the /v1/posts endpoints), review (the review page,
# verdicts), ops (/metrics, /openapi.json)
SCOPES = (SEARCH, INGEST, REVIEW, OPS)
MIN_KEY_CHARS = 24  # 24 hex digits are 96 bits: out of reach of guessing, throttled or not


@dataclass(frozen=True)
class ApiKey:
    """One client key, the indices it may use (every served index when ``indices`` is empty), what it may do
    with them (``scopes``, :data:`SCOPES`) and, for a reviewer, the name its verdicts are recorded under.

    The key never appears in a repr, a log line or an error message; :attr:`shown` (the name, else ``label``, where
    the key was configured) stands for it there.
    """

    key: str = field(repr=False)
    indices: tuple[str, ...] = ()
    scopes: tuple[str, ...] = (SEARCH,)
    name: str | None = None
    label: str = field(default="", compare=False)  # where it was configured: "entry 2 of SEMDUP_API_KEYS"

    def __post_init__(self) -> None:
        unknown = [s for s in self.scopes if s not in SCOPES]
        if unknown or not self.scopes:
            raise ConfigError(f"unknown API key scope(s) {unknown or '(none)'}; accepted: {', '.join(SCOPES)}")
        if self.name is not None and (not self.name or len(self.name) > 64 or not _NAME.fullmatch(self.name)):
            raise ConfigError(
                "a reviewer's name must be 1 to 64 letters, digits, '.', '_', '-' or '@' (it is stored with verdicts)"
            )

    def __repr__(self) -> str:
        return f"ApiKey(key='***', indices={self.indices!r}, scopes={self.scopes!r}, name={self.name!r})"

    @property
    def who(self) -> str:
        """The reviewer's name: the one configured, else ``key-`` and 8 hex digits of the key's SHA-256 (stable
        across restarts, and not the key)."""
        return self.name or "key-" + hashlib.sha256(self.key.encode("utf-8")).hexdigest()[:8]

    @property
    def shown(self) -> str:
        """How messages name the key: its name, else where it was configured (never the key, nor a hash of it:
        a hash of a short key gives the key away)."""
        return repr(self.name) if self.name else (self.label or "(unlabelled)")


_NAME = re.compile(r"[\w.@-]+")


def default_workers() -> int:
    """uvicorn worker processes when none are asked for: one per usable CPU (the per-request Python work holds
    the GIL, so processes, not threads, use more cores), at most :data:`MAX_DEFAULT_WORKERS`."""
    return min(usable_cpus(), MAX_DEFAULT_WORKERS)


MAX_DEFAULT_WORKERS = 16


def _items(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split("|") if n.strip())


def parse_api_keys(text: str, source: str = "SEMDUP_API_KEYS") -> tuple[ApiKey, ...]:
    """``KEY:INDEX|INDEX,KEY2:*,KEY3,KEY4:INDEX:review:NAME`` -> keys with their indices (``*`` or none: every
    served index), scopes (none given: ``search``) and reviewer names.

    Raises:
        ConfigError: an empty key, a key with white space, an empty index or scope list, an unknown scope, too many
            fields. Messages name the entry by its position, never the key.
    """
    out = []
    for pos, entry in enumerate((e.strip() for e in text.split(",")), 1):
        if not entry:
            continue
        key, *rest = entry.split(":")
        if not key or any(c.isspace() for c in key):
            raise ConfigError(f"entry {pos} of {source} has an empty key or white space in it; write KEY:INDEX|INDEX")
        if len(rest) > 3:
            raise ConfigError(
                f"entry {pos} of {source} has more than four ':'-separated fields; write "
                "KEY:INDEX|INDEX:SCOPE|SCOPE:NAME"
            )
        indices = _items(rest[0]) if rest else ()
        if rest and not indices:
            raise ConfigError(f"entry {pos} of {source} lists no index after ':'; write KEY:INDEX|INDEX or KEY:*")
        scopes = _items(rest[1]) if len(rest) > 1 else (SEARCH,)
        if not scopes:
            raise ConfigError(f"entry {pos} of {source} lists no scope; accepted: {', '.join(SCOPES)}")
        name = rest[2].strip() if len(rest) > 2 else None
        try:
            label = f"entry {pos} of {source}"
            out.append(ApiKey(key, () if indices == ("*",) else indices, tuple(dict.fromkeys(scopes)), name, label))
        except ConfigError as exc:
            raise ConfigError(f"entry {pos} of {source}: {exc}") from None
    return tuple(out)


def api_keys_of(value: Any, source: str) -> tuple[ApiKey, ...]:
    """``api_keys`` from the environment's string or a config file's mapping ``{key: [indices] | "*"}``."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        return parse_api_keys(value, source)
    if isinstance(value, Mapping):

        def label_of(pos: int) -> str:
            return f"key {pos} of api_keys in {source}"

        keys = []
        for pos, (key, spec) in enumerate(value.items(), 1):
            scopes: list[str] = [SEARCH]
            name = None
            if isinstance(spec, Mapping):  # {indices: [...] | "*", scopes: [...], name: "alice"}
                unknown = sorted(set(spec) - {"indices", "scopes", "name", "label"})
                if unknown:
                    raise ConfigError(
                        f"api_keys in {source}: unknown field(s) {unknown}; accepted: indices, scopes, name, label"
                    )
                raw_scopes = spec.get("scopes") or [SEARCH]
                scopes = [raw_scopes] if isinstance(raw_scopes, str) else [str(x) for x in raw_scopes]
                name = None if spec.get("name") is None else str(spec["name"])
                label = str(spec.get("label") or label_of(pos))
                spec = spec.get("indices")
            else:
                label = label_of(pos)
            names = [spec] if isinstance(spec, str) else list(spec or [])
            indices = () if names in ([], ["*"]) else tuple(str(n) for n in names)
            keys.append(ApiKey(str(key), indices, tuple(dict.fromkeys(scopes)), name, label))
        return tuple(keys)
    if isinstance(value, (list, tuple)) and all(isinstance(k, ApiKey) for k in value):
        return tuple(value)
    raise ConfigError(
        f"api_keys in {source} must be 'KEY:INDEX|INDEX[:SCOPES[:NAME]],...' or a mapping key -> indices (or -> "
        "{indices, scopes, name})"
    )


def proxy_network(
    item: str,
) -> ipaddress.IPv4Address | ipaddress.IPv6Address | ipaddress.IPv4Network | ipaddress.IPv6Network:
    """A trusted proxy as uvicorn reads it: an address, or a network (host bits cleared).

    Raises:
        ValueError: neither.
    """
    item = item.strip()
    return ipaddress.ip_network(item, strict=False) if "/" in item else ipaddress.ip_address(item)


def _shown(model: BaseModel, secrets: tuple[str, ...]) -> str:
    """``model``'s repr with the ``secrets`` fields as ``***`` when set (each field's own repr masks the rest)."""
    shown = {name: getattr(model, name) for name in type(model).model_fields}
    shown.update({name: "***" for name in secrets if shown[name]})
    return f"{type(model).__name__}(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"


class ReviewSection(BaseModel):
    """The review page (the tree's ``review:`` section): its session cookies and links to the site. Checked when
    the service starts (:class:`ServiceSettings`), so ``semdup config show`` prints a bad value rather than failing.
    Review sessions (:mod:`semdup.review.sessions`) end after ``session_idle`` seconds unused or ``session_max_age``
    after login."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_secret: str | None = None  # the review page's cookies; None: random
    session_max_age: int = 8 * 3600
    session_idle: int = 1800
    post_url: str | None = None  # e.g. https://travel.stackexchange.com/questions/{id}
    stats_ttl: float = 60.0

    def check(self) -> None:
        """Raises:
        ConfigError: a short secret, session bounds out of range, a post URL that is not an http(s) template."""
        if self.session_secret is not None and len(self.session_secret) < 32:
            raise ConfigError(
                "SEMDUP_SESSION_SECRET must hold at least 32 characters (it signs the review page's session "
                "cookies); make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
            )
        if not 60 <= self.session_max_age <= 30 * 86400:
            raise ConfigError(f"SEMDUP_SESSION_MAX_AGE must be within 60..2592000 seconds, got {self.session_max_age}")
        if not 60 <= self.session_idle <= self.session_max_age:
            raise ConfigError(
                f"SEMDUP_SESSION_IDLE must be within 60 seconds..SEMDUP_SESSION_MAX_AGE ({self.session_max_age}), "
                f"got {self.session_idle}"
            )
        if not 0 <= self.stats_ttl <= 3600:
            raise ConfigError(f"SEMDUP_REVIEW_STATS_TTL must be within 0..3600 seconds, got {self.stats_ttl}")
        if self.post_url is not None:
            scheme = self.post_url.split(":", 1)[0].lower()
            if scheme not in ("http", "https") or "{id}" not in self.post_url:
                raise ConfigError(
                    "SEMDUP_POST_URL must be an http(s) URL holding {id} (and optionally {index}), e.g. "
                    f"https://travel.stackexchange.com/questions/{{id}}; got {self.post_url!r}"
                )
            try:
                self.post_url.format(id="1", index="x")
            except (KeyError, IndexError, ValueError) as exc:
                raise ConfigError(f"SEMDUP_POST_URL may hold only {{id}} and {{index}}: {exc!r}") from None

    def __repr__(self) -> str:
        return _shown(self, ("session_secret",))

    __str__ = __repr__


class ServiceSection(BaseModel):
    """The HTTP service (the tree's ``service:`` section): what it serves, to whom, and within which bounds.
    Types are checked when the tree is read; what needs the other sections too (an index, a key unless auth is
    off, a broker for ingest) when the service starts (:class:`ServiceSettings`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: str | None = None
    indices: tuple[str, ...] = ()
    api_key: str | None = None
    api_keys: tuple[ApiKey, ...] = ()
    auth: bool = True
    max_body_bytes: int = 1 << 20
    max_text_chars: int = MAX_TEXT_CHARS  # per title or body; the default is the limit every other path applies
    max_k: int = 100
    threads: int = 16
    onnx_threads: int = 2
    max_in_flight: int = 4
    workers: int | None = None
    ingest: bool | None = None  # None: on exactly when a broker is set
    max_ingest_posts: int = 1000
    ops_auth: bool = True  # /metrics and /openapi.json need a key with the ops scope
    auth_failures: int = 10
    auth_window: float = 60.0
    auth_block: float = 60.0
    runtime_dir: str | None = None
    forwarded_allow_ips: tuple[str, ...] = ()

    @field_validator("forwarded_allow_ips")
    @classmethod
    def _proxies(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """Each an IP address, a network or ``*``, written as uvicorn compares them (``10.0.0.5/24`` would be a
        name to uvicorn, never matched: it becomes ``10.0.0.0/24``)."""
        out = []
        for item in value:
            try:
                out.append(item if item == "*" else str(proxy_network(item)))
            except ValueError:
                raise ConfigError(
                    f"SEMDUP_FORWARDED_ALLOW_IPS holds {item[:64]!r}, not an IP address or network; name the reverse "
                    "proxy in front of the service, e.g. 10.0.0.5 or 10.0.0.0/24"
                ) from None
        return tuple(out)

    def client_address_rule(self) -> str:
        """Which address a request is counted by (the failure throttle, :mod:`semdup.service.auth_throttle`), in
        words: ``semdup config show`` prints it."""
        if not self.forwarded_allow_ips:
            return "the connection's own address (no proxy trusted: X-Forwarded-For is ignored)"
        if "*" in self.forwarded_allow_ips:
            return (
                "the first X-Forwarded-For address of every request: any client may choose the address it is "
                "counted by (SEMDUP_FORWARDED_ALLOW_IPS=*)"
            )
        return (
            f"on connections from {', '.join(self.forwarded_allow_ips)}: the last X-Forwarded-For address that is "
            "not one of them; on any other connection its own address"
        )

    def __repr__(self) -> str:  # keys never in a repr (ApiKey's own repr masks its key)
        return _shown(self, ("api_key",))

    __str__ = __repr__


class ServiceSettings(ServiceSection):
    """Everything ``create_app`` needs: the ``service:`` section's fields (inherited, not copied) with an index
    required, the ``review:`` section, and the parts of the other sections the service reads. The composition root
    builds it from the settings tree (:meth:`semdup.apps.settings.Settings.service_settings`) and passes it down;
    building it checks everything the service needs to start.

    ``indices`` are the served indices (``index`` first; it is added when missing); ``api_key`` may search all of
    them, each of ``api_keys`` those it lists; ``ingest`` is resolved (None: on exactly when a broker is set).

    Guessing (:mod:`semdup.service.auth_throttle`): an address may fail ``auth_failures`` times (a wrong key, a
    wrong login) within ``auth_window`` seconds; then it gets 429 for ``auth_block`` seconds, twice as long for
    each block in a row (at most an hour). One wrong key sent again counts once against the address and the
    repeats against that key alone, blocked by the same rule (a stale connector key blocks only itself).
    ``runtime_dir`` holds what the worker processes of one ``semdup serve``
    share (those counts); None: kept in this process only. With ingest on, each process sweeps the unfinished jobs
    of the served indices (:mod:`semdup.ingest.sweeper`), with the bound ``sweep_after`` (``worker.sweep_after``).
    """

    index: str
    bundle: str
    opensearch: OpenSearchSettings
    reranker: RerankerSettings = RerankerSettings()
    calibration: str | None = None
    broker: BrokerSettings | None = None
    sweep_after: float = DEFAULT_SWEEP_AFTER
    review: ReviewSection = ReviewSection()

    @model_validator(mode="after")
    def _check(self) -> ServiceSettings:
        check_index_name(self.index, "SEMDUP_INDEX")
        if self.ingest is None:
            object.__setattr__(self, "ingest", self.broker is not None)
        elif self.ingest and self.broker is None:
            raise ConfigError(
                "SEMDUP_INGEST is on but no broker is set: set SEMDUP_BROKER_URL (the indexer's Celery broker) "
                "or SEMDUP_INGEST=0"
            )
        if self.max_in_flight < 0:
            raise ConfigError(
                f"SEMDUP_MAX_IN_FLIGHT must be >= 0 requests per worker process (0 = no bound), got "
                f"{self.max_in_flight}"
            )
        if not 1 <= self.max_ingest_posts <= 100_000:
            raise ConfigError(f"max_ingest_posts must be within 1..100000, got {self.max_ingest_posts}")
        served = tuple(dict.fromkeys((self.index, *self.indices)))
        for name in served:
            check_index_name(name, "SEMDUP_INDICES entry")
        object.__setattr__(self, "indices", served)
        for pos, entry in enumerate(self.api_keys, 1):
            unknown = [n for n in entry.indices if n not in served]
            if unknown:
                raise ConfigError(
                    f"API key {pos} of SEMDUP_API_KEYS names {unknown}, which this service does not serve; "
                    f"add them to SEMDUP_INDICES (now {', '.join(served)})"
                )
        if self.auth and not self.api_key and not self.api_keys:
            raise ConfigError(
                "the reranking service refuses to start without an API key: set SEMDUP_API_KEY (clients send it "
                "in the X-API-Key header) or SEMDUP_API_KEYS, or set SEMDUP_AUTH=off explicitly to serve without "
                "access control"
            )
        if self.auth:
            for entry in self.keys:
                if len(entry.key) < MIN_KEY_CHARS:
                    raise ConfigError(
                        f"API key {entry.shown} is shorter than {MIN_KEY_CHARS} characters: a short key can be "
                        "guessed; make a long random one, e.g. with `openssl rand -hex 24`"
                    )
        if self.auth_failures < 1 or not 1 <= self.auth_window <= 86400 or not 1 <= self.auth_block <= 3600:
            raise ConfigError(
                "SEMDUP_AUTH_FAILURES must be >= 1, SEMDUP_AUTH_WINDOW within 1..86400 seconds and SEMDUP_AUTH_BLOCK "
                f"within 1..3600 seconds; got {self.auth_failures}, {self.auth_window:g}, {self.auth_block:g}"
            )
        self.review.check()
        if (
            self.max_body_bytes < 1024
            or self.max_text_chars < 1
            or self.max_k < 1
            or self.threads < 1
            or self.onnx_threads < 0
        ):
            raise ConfigError(
                f"max_body_bytes >= 1024, max_text_chars >= 1, max_k >= 1, threads >= 1 and onnx_threads >= 0 are "
                f"needed; got {self.max_body_bytes}, {self.max_text_chars}, {self.max_k}, {self.threads}, "
                f"{self.onnx_threads}"
            )
        return self

    @property
    def keys(self) -> tuple[ApiKey, ...]:
        """Every configured key: ``api_key`` (search scope, every served index), then ``api_keys``."""
        single = (ApiKey(self.api_key, label="SEMDUP_API_KEY"),) if self.api_key else ()
        return single + self.api_keys

    def key_of(self, given: str | None) -> ApiKey | None:
        """The configured key equal to ``given``, else None; every key is compared in constant time, whichever
        matches (so the time taken tells nothing about which keys exist)."""
        found: ApiKey | None = None
        raw = (given or "").encode("utf-8")
        for entry in self.keys:
            if hmac.compare_digest(raw, entry.key.encode("utf-8")) and given and found is None:
                found = entry
        return found

    def key_indices(self, given: str | None, scope: str = SEARCH) -> tuple[str, ...] | None:
        """The indices the holder of ``given`` may use with ``scope``, None for a missing or wrong key, or a key
        without that scope (every served index when auth is off)."""
        if not self.auth:
            return self.indices
        entry = self.key_of(given)
        return None if entry is None or scope not in entry.scopes else entry.indices or self.indices

    def reviewer(self, given: str | None) -> ApiKey | None:
        """The key ``given`` when it holds the ``review`` scope, else None (also with auth off: verdicts record
        who gave them, so the review page needs keys)."""
        if not self.auth:
            return None
        entry = self.key_of(given)
        return entry if entry is not None and REVIEW in entry.scopes else None

    def review_indices(self, key: ApiKey) -> tuple[str, ...]:
        """The served indices whose flags ``key`` may review."""
        return key.indices or self.indices

    def startup_warnings(self) -> list[str]:
        """What an operator should hear once when the service starts: keys that lost a power they may have relied
        on (``search`` keys could ingest before the ``ingest`` scope), an ops rule nobody can pass. Labels only,
        never keys."""
        if not self.auth:
            return []
        out = []
        readers = [k.shown for k in self.keys if SEARCH in k.scopes and INGEST not in k.scopes]
        if self.ingest and readers:
            out.append(
                f"API key(s) {', '.join(readers)} hold the search scope but not ingest: search keys are read-only "
                "now, so POST /v1/posts, /v1/posts/delete and /v1/posts/sync answer them 403. Give the keys that "
                "write the ingest scope (KEY:INDEX:search|ingest); keep search-only keys for browsers"
            )
        if self.ops_auth and not any(OPS in k.scopes for k in self.keys):
            out.append(
                "no API key holds the ops scope, so /metrics and /openapi.json answer 401 to everyone: give the "
                "scraper a key with it (KEY:*:ops:prometheus) or set SEMDUP_OPS_AUTH=0 on a private network"
            )
        return out

    @property
    def review_enabled(self) -> bool:
        """Whether the review page is on: access control on and some key holding the ``review`` scope."""
        return self.auth and any(REVIEW in k.scopes for k in self.api_keys)

    def default_index(self, allowed: tuple[str, ...]) -> str:
        """The index a request that names none searches: ``index`` when allowed, else the key's first one."""
        return self.index if self.index in allowed else allowed[0]
