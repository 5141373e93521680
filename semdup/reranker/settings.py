"""Settings of the reranker and its HTTP service: one frozen dataclass, read at the edge (CLI, app factory).

Sources, highest first: environment variables, the ``reranker:`` section of the config file
(``$SEMDUP_CONFIG``, YAML or TOML, the :mod:`semdup.core.settings` pattern), then the defaults below::

    SEMDUP_BUNDLE               the model bundle (directory or .tar.gz)            required
    SEMDUP_INDEX                the index a request without "index" searches        required
    SEMDUP_INDICES              comma-separated indices/aliases requests may name   SEMDUP_INDEX only
    SEMDUP_TEMPLATES            comma-separated lexical models (bm25,lmj,dfr,ib)    bm25
    SEMDUP_TEMPLATE_VARIANT     text (title + body) or title                        text
    SEMDUP_SPARSE               add learned-sparse candidates                       false
    SEMDUP_KNN                  k-NN candidates: true, false, or auto (where mapped) auto
    SEMDUP_K_CANDIDATES         candidates per retrieval path                       100
    SEMDUP_API_KEY              one key clients send in X-API-Key (every index)     required unless auth off
    SEMDUP_API_KEYS             keys limited to some indices (format below)         none
    SEMDUP_AUTH                 "off" turns access control off (explicitly)         on
    SEMDUP_MAX_BODY_BYTES       request bodies above this get 413                   1 MiB
    SEMDUP_MAX_TEXT_CHARS       title or body above this gets 422                   100000
    SEMDUP_MAX_K                most candidates a request may ask for               100
    SEMDUP_SEARCH_TIMEOUT       seconds per OpenSearch call from the reranker       5
    SEMDUP_THREADS              request threads per worker process                  16
    SEMDUP_MAX_IN_FLIGHT        requests in flight per worker; past it 503 (0 = off) 4
    SEMDUP_ONNX_THREADS         onnxruntime threads per request (0 = all cores)     1
    SEMDUP_WORKERS              uvicorn worker processes (semdup serve)             usable CPUs, at most 16
    SEMDUP_FIELD_CACHE          candidates' stored fields kept in memory (0 = off)   50000
    SEMDUP_INGEST               the /v1/posts endpoints (HTTP ingest) on or off      on if a broker is set
    SEMDUP_MAX_INGEST_POSTS     most posts or ids one ingest request may carry       1000
    SEMDUP_SESSION_SECRET       signs the review page's session cookies (>= 32 chars) random per start
    SEMDUP_SESSION_MAX_AGE      seconds a review login lasts                        43200 (12 h)
    SEMDUP_POST_URL             a post's page on the site, {id} (and {index}) filled none
    SEMDUP_REVIEW_STATS_TTL     seconds the review metrics read from the cluster are kept  60

Access (:class:`ApiKey`): a request names an ``index`` only from the allow-list ``SEMDUP_INDICES`` (plus
``SEMDUP_INDEX``), compared as exact strings, so patterns (``*``, ``_all``, ``a,b``), other indices and aliases
are never searched. ``SEMDUP_API_KEYS`` narrows it per key: comma-separated ``KEY:INDEX|INDEX`` entries, where
``KEY`` alone or ``KEY:*`` may search every served index; each named index must be served. A key that may not
search ``SEMDUP_INDEX`` searches its first index when a request names none::

    SEMDUP_INDEX=travel SEMDUP_INDICES=travel,cooking SEMDUP_API_KEYS='k1:travel,k2:cooking,k3:*'

An entry may go on with the key's scopes and a reviewer's name, ``KEY:INDICES:SCOPES[:NAME]``: scopes are
``search`` (``/v1/rerank`` and the ingest endpoints: what every key could do before scopes existed, and what an
entry without scopes still means) and ``review`` (the review page and its verdicts, :mod:`semdup.review`), joined
by ``|``; the name is recorded with the reviewer's verdicts (else ``key-`` and 8 hex digits of the key's SHA-256).
``SEMDUP_API_KEY`` has the ``search`` scope only::

    SEMDUP_API_KEYS='k1:travel,mod7:travel:review:alice,ops2:*:search|review'

OpenSearch itself (URL, auth, TLS) comes from :class:`semdup.core.settings.OpenSearchSettings`, the broker the
ingest endpoints send tasks to from :class:`~semdup.core.settings.BrokerSettings` (``SEMDUP_BROKER_URL``), the
log format from ``SEMDUP_LOG_FORMAT``, as for every semdup process (:mod:`semdup.core.logs`).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from semdup.core.errors import BrokerUnavailable, ConfigError
from semdup.core.index_names import check_index_name
from semdup.core.post_rules import MAX_TEXT_CHARS
from semdup.core.settings import BrokerSettings, OpenSearchSettings, load_config_file, parse_auto_bool, parse_bool
from semdup.index_format.schema import LEXICAL_MODELS
from semdup.search_templates import VARIANTS

__all__ = [
    "RerankerSettings",
    "ServiceSettings",
    "ApiKey",
    "SCOPES",
    "parse_api_keys",
    "usable_cpus",
    "default_workers",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RerankerSettings:
    """How the reranker finds candidates; everything that changes which candidates a call sees.

    Args:
        templates: lexical models whose stored templates give candidates; the first one gives the lexical
            score that T-SCQA's lexnorm normalises.
        variant: ``text`` (match title + body) or ``title``.
        sparse: add learned-sparse candidates (rank_feature dot product on ``semdup.terms``).
        knn: add k-NN candidates on ``semdup.vector`` (needs a ``knn_vector`` mapping); None (the default) =
            wherever the index has that mapping and the bundle a dense encoder (the candidates the demo's figures
            come from: Travel recall 96.39 with them, 81.53 BM25 alone), quietly off elsewhere.
        k_candidates: candidates per retrieval path (1..1000).
        search_timeout: seconds allowed for each OpenSearch call.
        field_cache: candidates whose stored fields are kept in memory (exact, version-checked; 0 = off).
    """

    templates: tuple[str, ...] = ("bm25",)
    variant: str = "text"
    sparse: bool = False
    knn: bool | None = None
    k_candidates: int = 100
    search_timeout: float = 5.0
    field_cache: int = 0

    def __post_init__(self) -> None:
        if self.field_cache < 0:
            raise ConfigError(f"field_cache must be >= 0 entries (0 = off), got {self.field_cache}")
        if not self.templates:
            raise ConfigError(f"give at least one candidate template; accepted: {', '.join(LEXICAL_MODELS)}")
        unknown = [t for t in self.templates if t not in LEXICAL_MODELS]
        if unknown:
            raise ConfigError(f"unknown template(s) {unknown}; accepted: {', '.join(LEXICAL_MODELS)}")
        if self.variant not in VARIANTS:
            raise ConfigError(f"unknown template variant {self.variant!r}; accepted: {', '.join(VARIANTS)}")
        if not 1 <= self.k_candidates <= 1000:
            raise ConfigError(f"k_candidates must be within 1..1000, got {self.k_candidates}")
        if self.search_timeout <= 0:
            raise ConfigError(f"search_timeout must be > 0 seconds, got {self.search_timeout}")


SEARCH, REVIEW = "search", "review"
SCOPES = (SEARCH, REVIEW)  # what a key may do: search (rerank, ingest), review (the review page, verdicts)


@dataclass(frozen=True)
class ApiKey:
    """One client key, the indices it may use (every served index when ``indices`` is empty), what it may do
    with them (``scopes``, :data:`SCOPES`) and, for a reviewer, the name its verdicts are recorded under.

    The key never appears in a repr, a log line or an error message.
    """

    key: str = field(repr=False)
    indices: tuple[str, ...] = ()
    scopes: tuple[str, ...] = (SEARCH,)
    name: str | None = None

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


_NAME = re.compile(r"[\w.@-]+")


def usable_cpus() -> int:
    """CPUs this process may use: its affinity mask, bounded by a cgroup v2 CPU quota (a container's limit)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text(encoding="utf-8").split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, int(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cpus)


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
            out.append(ApiKey(key, () if indices == ("*",) else indices, tuple(dict.fromkeys(scopes)), name))
        except ConfigError as exc:
            raise ConfigError(f"entry {pos} of {source}: {exc}") from None
    return tuple(out)


def _api_keys_of(value: Any, source: str) -> tuple[ApiKey, ...]:
    """``api_keys`` from the environment's string or a config file's mapping ``{key: [indices] | "*"}``."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        return parse_api_keys(value, source)
    if isinstance(value, Mapping):
        keys = []
        for key, spec in value.items():
            scopes: list[str] = [SEARCH]
            name = None
            if isinstance(spec, Mapping):  # {indices: [...] | "*", scopes: [...], name: "alice"}
                unknown = sorted(set(spec) - {"indices", "scopes", "name"})
                if unknown:
                    raise ConfigError(
                        f"api_keys in {source}: unknown field(s) {unknown}; accepted: indices, scopes, name"
                    )
                raw_scopes = spec.get("scopes") or [SEARCH]
                scopes = [raw_scopes] if isinstance(raw_scopes, str) else [str(x) for x in raw_scopes]
                name = None if spec.get("name") is None else str(spec["name"])
                spec = spec.get("indices")
            names = [spec] if isinstance(spec, str) else list(spec or [])
            indices = () if names in ([], ["*"]) else tuple(str(n) for n in names)
            keys.append(ApiKey(str(key), indices, tuple(dict.fromkeys(scopes)), name))
        return tuple(keys)
    if isinstance(value, (list, tuple)) and all(isinstance(k, ApiKey) for k in value):
        return tuple(value)
    raise ConfigError(
        f"api_keys in {source} must be 'KEY:INDEX|INDEX[:SCOPES[:NAME]],...' or a mapping key -> indices (or -> "
        "{indices, scopes, name})"
    )


@dataclass(frozen=True)
class ServiceSettings:
    """Everything ``create_app`` needs; build it with :meth:`from_env` at the edge, then pass it down.

    ``indices`` are the served indices (``index`` first; it is added when missing); ``api_key`` may search all of
    them, each of ``api_keys`` those it lists.
    """

    bundle: str
    index: str
    opensearch: OpenSearchSettings
    reranker: RerankerSettings = RerankerSettings()
    api_key: str | None = field(default=None, repr=False)
    auth: bool = True
    max_body_bytes: int = 1 << 20
    max_text_chars: int = MAX_TEXT_CHARS  # per title or body; the default is the limit every other path applies
    max_k: int = 100
    threads: int = 16
    calibration: str | None = None
    indices: tuple[str, ...] = ()
    api_keys: tuple[ApiKey, ...] = ()
    onnx_threads: int = 1
    broker: BrokerSettings | None = None
    ingest: bool | None = None  # None: on exactly when a broker is set
    max_ingest_posts: int = 1000
    max_in_flight: int = 4
    session_secret: str | None = field(default=None, repr=False)  # the review page's cookies; None: random
    session_max_age: int = 12 * 3600
    post_url: str | None = None  # e.g. https://travel.stackexchange.com/questions/{id}
    review_stats_ttl: float = 60.0

    def __post_init__(self) -> None:
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
        self._check_review()
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

    def _check_review(self) -> None:
        if self.session_secret is not None and len(self.session_secret) < 32:
            raise ConfigError(
                "SEMDUP_SESSION_SECRET must hold at least 32 characters (it signs the review page's session "
                "cookies); make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
            )
        if not 60 <= self.session_max_age <= 30 * 86400:
            raise ConfigError(f"SEMDUP_SESSION_MAX_AGE must be within 60..2592000 seconds, got {self.session_max_age}")
        if not 0 <= self.review_stats_ttl <= 3600:
            raise ConfigError(f"SEMDUP_REVIEW_STATS_TTL must be within 0..3600 seconds, got {self.review_stats_ttl}")
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
        shown = {f.name: getattr(self, f.name) for f in fields(self)}
        if shown["api_key"]:
            shown["api_key"] = "***"
        if shown.pop("session_secret"):  # named only when set, and never shown
            shown["session_secret"] = "***"
        return "ServiceSettings(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"

    __str__ = __repr__

    def _match(self, given: str | None, scope: str) -> ApiKey | None:
        """The configured key equal to ``given`` that holds ``scope``; every key is compared in constant time,
        whichever matches (so the time taken tells nothing about which keys exist)."""
        found: ApiKey | None = None
        raw = (given or "").encode("utf-8")
        candidates = ([ApiKey(self.api_key)] if self.api_key else []) + list(self.api_keys)
        for entry in candidates:
            if (
                hmac.compare_digest(raw, entry.key.encode("utf-8"))
                and given
                and found is None
                and scope in entry.scopes
            ):
                found = entry
        return found

    def key_indices(self, given: str | None) -> tuple[str, ...] | None:
        """The indices the holder of ``given`` may search, None for a missing or wrong key, or a key without the
        ``search`` scope (every served index when auth is off)."""
        if not self.auth:
            return self.indices
        entry = self._match(given, SEARCH)
        return None if entry is None else entry.indices or self.indices

    def reviewer(self, given: str | None) -> ApiKey | None:
        """The key ``given`` when it holds the ``review`` scope, else None (also with auth off: verdicts record
        who gave them, so the review page needs keys)."""
        return self._match(given, REVIEW) if self.auth else None

    def review_indices(self, key: ApiKey) -> tuple[str, ...]:
        """The served indices whose flags ``key`` may review."""
        return key.indices or self.indices

    @property
    def review_enabled(self) -> bool:
        """Whether the review page is on: access control on and some key holding the ``review`` scope."""
        return self.auth and any(REVIEW in k.scopes for k in self.api_keys)

    def default_index(self, allowed: tuple[str, ...]) -> str:
        """The index a request that names none searches: ``index`` when allowed, else the key's first one."""
        return self.index if self.index in allowed else allowed[0]

    @classmethod
    def from_env(
        cls,
        config_file: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        **overrides: Any,
    ) -> ServiceSettings:
        """Settings from the environment, else the config file's ``reranker:`` section; ``overrides`` win (CLI).

        Raises:
            ConfigError: a missing bundle/index, a malformed value, no API key while auth is on.
        """
        env = os.environ if env is None else env
        path = config_file or env.get("SEMDUP_CONFIG")
        values: dict[str, Any] = {}
        if path:
            section = load_config_file(path).get("reranker") or {}
            if not isinstance(section, dict):
                raise ConfigError(f"section 'reranker' in {path} must be a mapping")
            values.update(section)
        env_names = {
            "bundle": "SEMDUP_BUNDLE",
            "index": "SEMDUP_INDEX",
            "indices": "SEMDUP_INDICES",
            "templates": "SEMDUP_TEMPLATES",
            "variant": "SEMDUP_TEMPLATE_VARIANT",
            "sparse": "SEMDUP_SPARSE",
            "knn": "SEMDUP_KNN",
            "k_candidates": "SEMDUP_K_CANDIDATES",
            "api_key": "SEMDUP_API_KEY",
            "api_keys": "SEMDUP_API_KEYS",
            "auth": "SEMDUP_AUTH",
            "max_body_bytes": "SEMDUP_MAX_BODY_BYTES",
            "max_text_chars": "SEMDUP_MAX_TEXT_CHARS",
            "max_k": "SEMDUP_MAX_K",
            "search_timeout": "SEMDUP_SEARCH_TIMEOUT",
            "threads": "SEMDUP_THREADS",
            "onnx_threads": "SEMDUP_ONNX_THREADS",
            "calibration": "SEMDUP_CALIBRATION",
            "field_cache": "SEMDUP_FIELD_CACHE",
            "ingest": "SEMDUP_INGEST",
            "max_ingest_posts": "SEMDUP_MAX_INGEST_POSTS",
            "max_in_flight": "SEMDUP_MAX_IN_FLIGHT",
            "session_secret": "SEMDUP_SESSION_SECRET",
            "session_max_age": "SEMDUP_SESSION_MAX_AGE",
            "post_url": "SEMDUP_POST_URL",
            "review_stats_ttl": "SEMDUP_REVIEW_STATS_TTL",
        }
        for key, var in env_names.items():
            if env.get(var):
                values[key] = env[var]
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            broker: BrokerSettings | None = BrokerSettings.from_env(config_file, env)
        except BrokerUnavailable:  # no broker: the service runs, its ingest endpoints answer 503
            broker = None
        return cls.from_mapping(
            values, OpenSearchSettings.from_env(config_file, env), source=str(path or "env"), broker=broker
        )

    @classmethod
    def from_mapping(
        cls,
        values: Mapping[str, Any],
        opensearch: OpenSearchSettings,
        source: str = "",
        broker: BrokerSettings | None = None,
    ) -> ServiceSettings:
        """Build from plain values (strings from the environment are parsed here); the broker, like OpenSearch,
        comes from its own settings (``SEMDUP_BROKER_URL`` or the config file's ``broker:`` section)."""
        known = {f.name for f in fields(RerankerSettings)} | ({f.name for f in fields(cls)} - {"broker"})
        unknown = sorted(set(values) - known)
        if unknown:
            moved = "; the log format is SEMDUP_LOG_FORMAT=json now" if "log_json" in unknown else ""
            raise ConfigError(
                f"unknown reranker setting(s) {unknown} in {source}; accepted: {', '.join(sorted(known))}{moved}"
            )
        for required in ("bundle", "index"):
            if not values.get(required):
                raise ConfigError(f"the reranker needs a {required}: set SEMDUP_{required.upper()} or --{required}")
        try:
            templates = values.get("templates", ("bm25",))
            if isinstance(templates, str):
                templates = tuple(t.strip() for t in templates.split(",") if t.strip())
            rr = RerankerSettings(
                templates=tuple(templates),
                variant=str(values.get("variant", "text")),
                sparse=parse_bool("sparse", values.get("sparse", False)),
                knn=parse_auto_bool("knn", values.get("knn")),
                k_candidates=int(values.get("k_candidates", 100)),
                search_timeout=float(values.get("search_timeout", 5.0)),
                field_cache=int(values.get("field_cache", 50_000)),
            )
            auth_value = values.get("auth", True)
            return cls(
                bundle=str(values["bundle"]),
                index=str(values["index"]),
                opensearch=opensearch,
                reranker=rr,
                api_key=str(values["api_key"]) if values.get("api_key") else None,
                auth=parse_bool("auth", auth_value),
                max_body_bytes=int(values.get("max_body_bytes", 1 << 20)),
                max_text_chars=int(values.get("max_text_chars", MAX_TEXT_CHARS)),
                max_k=int(values.get("max_k", 100)),
                threads=int(values.get("threads", 16)),
                calibration=str(values["calibration"]) if values.get("calibration") else None,
                indices=_names(values.get("indices")),
                api_keys=_api_keys_of(values.get("api_keys"), "SEMDUP_API_KEYS" if source == "env" else source),
                onnx_threads=int(values.get("onnx_threads", 1)),
                broker=broker,
                ingest=None if values.get("ingest") in (None, "") else parse_bool("ingest", values["ingest"]),
                max_ingest_posts=int(values.get("max_ingest_posts", 1000)),
                max_in_flight=int(values.get("max_in_flight", cls.max_in_flight)),
                session_secret=str(values["session_secret"]) if values.get("session_secret") else None,
                session_max_age=int(values.get("session_max_age", 12 * 3600)),
                post_url=str(values["post_url"]) if values.get("post_url") else None,
                review_stats_ttl=float(values.get("review_stats_ttl", 60.0)),
            )
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"a reranker setting is not a number where one is needed ({source}): {exc}") from exc


def _names(value: Any) -> tuple[str, ...]:
    """Index names from a comma-separated string or a list."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(str(n).strip() for n in items if str(n).strip())
