"""The one settings tree: every ``SEMDUP_*`` variable and config-file key, read once, typed and validated.

A process reads it once at its start (``semdup`` CLI, the worker app, the HTTP app factory) and hands each part
down as plain arguments; nothing below :mod:`semdup.apps` reads the environment::

    settings = load_settings()                      # environment > $SEMDUP_CONFIG file > defaults
    client = connect(settings.opensearch_settings())
    app = create_app(settings.service_settings())   # the HTTP service's part
    settings.explain()                              # {"opensearch.url": ("env", "SEMDUP_OPENSEARCH_URL"), ...}

Sources, highest first: values the CLI passes (``--bundle`` ...), environment variables (:data:`VARIABLES`), one
YAML or TOML config file (``$SEMDUP_CONFIG`` or ``--config``), the defaults. The file holds the tree's sections
(``opensearch:``, ``broker:``, ``model:``, ``candidates:``, ``service:``, ``review:``, ``worker:``, ``alerts:``,
``metrics:``, ``logging:``) and, as before, a flat ``reranker:`` section (its keys go where :data:`LEGACY_KEYS`
says). Each section is the frozen dataclass of the layer that uses it where one exists
(:class:`~semdup.core.settings.OpenSearchSettings`, :class:`~semdup.reranker.settings.RerankerSettings`, ...), so a
field is declared once, and pydantic (through pydantic-settings) coerces and checks it; a bad value is one
:class:`~semdup.core.errors.ConfigError` naming the variable or file key, what was expected and what was found
(a secret's value never). ``semdup config show`` prints the effective tree with secrets masked and where each value
came from; ``semdup config table`` writes the variable table (``docs/settings.md``, checked by a test).

``semdup serve`` hands the resolved tree to its uvicorn worker processes as one variable, :data:`HANDOFF_ENV`
(JSON; see :func:`handoff`), instead of one variable per setting.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from semdup.alerts.settings import AlertSettings
from semdup.core.errors import BrokerUnavailable, ConfigError, OpenSearchUnavailable
from semdup.core.logs import LOG_FORMATS
from semdup.core.post_rules import MAX_TEXT_CHARS
from semdup.core.settings import (
    START_HINT,
    BrokerSettings,
    OpenSearchSettings,
    load_config_file,
    parse_auto_bool,
    parse_bool,
    redact_url,
)
from semdup.indexer.retry import DEFAULT_RETRY_BUDGET, RetryPolicy
from semdup.indexer.worker_metrics import WorkerMetricsSettings
from semdup.reranker.settings import ApiKey, RerankerSettings, ServiceSettings, api_keys_of, default_workers

__all__ = [
    "Settings",
    "Var",
    "VARIABLES",
    "OTHER_VARIABLES",
    "LEGACY_KEYS",
    "HANDOFF_ENV",
    "load_settings",
    "handoff",
    "log_format_setting",
    "settings_table",
]

logger = logging.getLogger(__name__)

HANDOFF_ENV = "SEMDUP_SETTINGS"  # the resolved tree, JSON, from `semdup serve` to its uvicorn workers
CONFIG_ENV = "SEMDUP_CONFIG"
_RETIRED = {"SEMDUP_LOG_JSON": "set SEMDUP_LOG_FORMAT=json for JSON log lines"}
# The defaults of semdup.indexer.celery_app and .sweeper (modules that import Celery: a test checks they agree)
DEFAULT_VISIBILITY_TIMEOUT = 300  # seconds; celery_app's doc says why it must exceed a task plus a retry wait
DEFAULT_SWEEP_AFTER = 300.0


# --- the sections that have no dataclass in a lower layer -------------------------------------------------------
class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelSection(_Section):
    """The model bundle every process runs, and its calibration file (None: ``<bundle>.calibration.json``)."""

    bundle: str | None = None
    calibration: str | None = None


class ServiceSection(_Section):
    """The HTTP service: what it serves, to whom, and within which bounds."""

    index: str | None = None
    indices: tuple[str, ...] = ()
    api_key: str | None = None
    api_keys: tuple[ApiKey, ...] = ()
    auth: bool = True
    max_body_bytes: int = 1 << 20
    max_text_chars: int = MAX_TEXT_CHARS
    max_k: int = 100
    threads: int = 16
    onnx_threads: int = 1
    max_in_flight: int = 4
    workers: int | None = None
    ingest: bool | None = None
    max_ingest_posts: int = 1000

    def __repr__(self) -> str:  # keys never in a repr
        shown = self.model_dump(exclude={"api_key", "api_keys"})
        shown["api_key"] = "***" if self.api_key else None
        shown["api_keys"] = self.api_keys  # ApiKey's own repr masks the key
        return "ServiceSection(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"

    __str__ = __repr__


class ReviewSection(_Section):
    """The review page: its session cookies and links to the site."""

    session_secret: str | None = None
    session_max_age: int = 12 * 3600
    post_url: str | None = None
    stats_ttl: float = 60.0

    def __repr__(self) -> str:
        shown = self.model_dump(exclude={"session_secret"})
        return "ReviewSection(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ", session_secret=***)"

    __str__ = __repr__


class WorkerSection(_Section):
    """Delivery of the indexing tasks: redelivery, the retry budget, the producers' sweeper."""

    visibility_timeout: int = DEFAULT_VISIBILITY_TIMEOUT
    retry_budget: float = DEFAULT_RETRY_BUDGET
    sweep_after: float = DEFAULT_SWEEP_AFTER

    @field_validator("visibility_timeout")
    @classmethod
    def _visibility(cls, value: int) -> int:
        if value < 10:
            raise ConfigError(f"SEMDUP_VISIBILITY_TIMEOUT must be at least 10 seconds, found {value}; e.g. 300")
        return value

    @field_validator("retry_budget")
    @classmethod
    def _budget(cls, value: float) -> float:
        if value < 0:
            raise ConfigError(f"SEMDUP_RETRY_BUDGET must be seconds >= 0, found {value!r}; e.g. 1800")
        return value

    @field_validator("sweep_after")
    @classmethod
    def _sweep(cls, value: float) -> float:
        if not value > 0:
            raise ConfigError(f"SEMDUP_SWEEP_AFTER must be seconds > 0, found {value!r}; e.g. 300")
        return value


class AlertsSection(_Section):
    """Duplicate flagging chained by the indexing tasks."""

    flag_duplicates: bool = False
    flag_k: int = 10

    @field_validator("flag_k")
    @classmethod
    def _k(cls, value: int) -> int:
        if not 1 <= value <= 100:
            raise ConfigError(f"SEMDUP_FLAG_K must be within 1..100, got {value}")
        return value


class LoggingSection(_Section):
    format: Literal["text", "json"] = "text"


# --- the variables ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Var:
    """One environment variable: where its value goes in the tree (``section.field``), how its text is read,
    whether it is a secret (masked in ``config show``), and what it means (the generated table)."""

    name: str
    path: str
    help: str
    kind: str = "text"  # text | bool | auto_bool | csv | api_keys
    secret: bool = False
    expect: str = ""  # what a bad value is told it must be, where the type alone says too little


VARIABLES: tuple[Var, ...] = (
    Var(CONFIG_ENV, "config_file", "a YAML or TOML config file holding the sections below (lower than env)"),
    Var(
        "SEMDUP_OPENSEARCH_URL", "opensearch.url", "the cluster, http(s)://host:port (credentials in it are moved out)"
    ),
    Var("OPENSEARCH_URL", "opensearch.url", "the same, when SEMDUP_OPENSEARCH_URL is unset"),
    Var("SEMDUP_OPENSEARCH_USERNAME", "opensearch.username", "HTTP basic auth user"),
    Var("SEMDUP_OPENSEARCH_PASSWORD", "opensearch.password", "HTTP basic auth password", secret=True),
    Var("SEMDUP_OPENSEARCH_VERIFY_CERTS", "opensearch.verify_certs", "check the cluster's TLS certificate", "bool"),
    Var("SEMDUP_OPENSEARCH_CA_CERTS", "opensearch.ca_certs", "PEM file of the cluster's CA"),
    Var("SEMDUP_OPENSEARCH_TIMEOUT", "opensearch.timeout", "seconds per request (the client's one timeout)"),
    Var("SEMDUP_OPENSEARCH_MAX_RETRIES", "opensearch.max_retries", "retries on 502/503/504"),
    Var("SEMDUP_AWS_REGION", "opensearch.aws_region", "SigV4 signing for Amazon OpenSearch (needs semdup[aws])"),
    Var("SEMDUP_AWS_SERVICE", "opensearch.aws_service", "es (managed OpenSearch) or aoss (Serverless)"),
    Var("SEMDUP_BROKER_URL", "broker.url", "the Celery broker, redis://, rediss:// or amqp://", secret=True),
    Var("SEMDUP_BUNDLE", "model.bundle", "the model bundle (directory or .tar.gz) workers and service run"),
    Var("SEMDUP_CALIBRATION", "model.calibration", "calibration file (threshold, Platt); default beside the bundle"),
    Var(
        "SEMDUP_TEMPLATES",
        "candidates.templates",
        "lexical candidate templates, comma-separated (first: lexnorm's)",
        "csv",
    ),
    Var("SEMDUP_TEMPLATE_VARIANT", "candidates.variant", "templates match text (title + body) or title"),
    Var("SEMDUP_SPARSE", "candidates.sparse", "add learned-sparse candidates", "bool"),
    Var(
        "SEMDUP_KNN",
        "candidates.knn",
        "k-NN candidates: true, false or auto (wherever the index maps them)",
        "auto_bool",
    ),
    Var("SEMDUP_K_CANDIDATES", "candidates.k_candidates", "candidates per retrieval path (1..1000)"),
    Var("SEMDUP_SEARCH_TIMEOUT", "candidates.search_timeout", "seconds per OpenSearch call of the reranker"),
    Var(
        "SEMDUP_FIELD_CACHE",
        "candidates.field_cache",
        "candidates' stored fields kept in memory by the service (0 = off)",
    ),
    Var("SEMDUP_INDEX", "service.index", 'the index a request without "index" searches (the service needs it)'),
    Var("SEMDUP_INDICES", "service.indices", "comma-separated indices or aliases requests may name", "csv"),
    Var(
        "SEMDUP_API_KEY",
        "service.api_key",
        "one key clients send in X-API-Key (search scope, every index)",
        secret=True,
    ),
    Var(
        "SEMDUP_API_KEYS",
        "service.api_keys",
        "KEY:INDEX|INDEX[:SCOPES[:NAME]],... keys with indices and scopes",
        "api_keys",
        True,
    ),
    Var("SEMDUP_AUTH", "service.auth", "off turns access control off (explicitly)", "bool"),
    Var("SEMDUP_MAX_BODY_BYTES", "service.max_body_bytes", "request bodies above this get 413"),
    Var("SEMDUP_MAX_TEXT_CHARS", "service.max_text_chars", "a title or body above this gets 422"),
    Var("SEMDUP_MAX_K", "service.max_k", "most candidates a request may ask for"),
    Var("SEMDUP_THREADS", "service.threads", "request threads per service worker process"),
    Var("SEMDUP_ONNX_THREADS", "service.onnx_threads", "onnxruntime threads per request (0 = all cores)"),
    Var(
        "SEMDUP_MAX_IN_FLIGHT", "service.max_in_flight", "requests in flight per service worker; past it 503 (0 = off)"
    ),
    Var(
        "SEMDUP_WORKERS",
        "service.workers",
        "uvicorn worker processes of semdup serve (1..64)",
    ),
    Var(
        "SEMDUP_INGEST",
        "service.ingest",
        "the /v1/posts endpoints (HTTP ingest) on or off",
        "auto_bool",
    ),
    Var("SEMDUP_MAX_INGEST_POSTS", "service.max_ingest_posts", "most posts or ids one ingest request may carry"),
    Var(
        "SEMDUP_SESSION_SECRET",
        "review.session_secret",
        "signs the review page's cookies (>= 32 chars; default random per start)",
        secret=True,
    ),
    Var("SEMDUP_SESSION_MAX_AGE", "review.session_max_age", "seconds a review login lasts"),
    Var("SEMDUP_POST_URL", "review.post_url", "a post's page on the site, with {id} (and {index})"),
    Var("SEMDUP_REVIEW_STATS_TTL", "review.stats_ttl", "seconds the review metrics read from the cluster are kept"),
    Var(
        "SEMDUP_VISIBILITY_TIMEOUT",
        "worker.visibility_timeout",
        "seconds before a dead worker's batch is redelivered (Redis)",
        expect="whole seconds",
    ),
    Var(
        "SEMDUP_RETRY_BUDGET",
        "worker.retry_budget",
        "seconds a batch retries an unreachable cluster before it is parked",
        expect="seconds >= 0",
    ),
    Var(
        "SEMDUP_SWEEP_AFTER",
        "worker.sweep_after",
        "seconds a batch may be neither done nor queued before a waiting producer sends it again",
        expect="seconds > 0",
    ),
    Var("SEMDUP_FLAG_DUPLICATES", "alerts.flag_duplicates", "1: the indexing tasks chain duplicate flagging", "bool"),
    Var("SEMDUP_FLAG_K", "alerts.flag_k", "at most this many flags per post (1..100)"),
    Var(
        "SEMDUP_METRICS_PORT",
        "metrics.port",
        "the worker serves /metrics on this port (unset: off)",
        expect="a TCP port number",
    ),
    Var("SEMDUP_METRICS_ADDR", "metrics.addr", "the address the worker's /metrics listens on"),
    Var(
        "PROMETHEUS_MULTIPROC_DIR",
        "metrics.multiproc_dir",
        "prometheus_client's folder for the worker processes' counts",
    ),
    Var("SEMDUP_LOG_FORMAT", "logging.format", "text, or json: one JSON object per line, secrets scrubbed"),
)

# Read outside the tree, by code that runs where no deployed process starts (the dev stack, research and tests),
# or not read at all: listed so that the table names every SEMDUP_* variable the code holds.
OTHER_VARIABLES: tuple[tuple[str, str, str], ...] = (
    ("SEMDUP_DATA_DIR", "semdup/data/paths.py", "the shared data sets (default: shared/data beside the checkout)"),
    ("SEMDUP_CACHE", "semdup/core/model_files.py", "downloads, unpacked models and servers (default ~/.cache/semdup)"),
    ("SEMDUP_OPENSEARCH_HEAP", "semdup/devstack", "heap of the embedded OpenSearch (dev stack only)"),
    ("SEMDUP_OPENSEARCH_VERSION", "semdup/devstack", "version of the embedded OpenSearch (dev stack only)"),
    ("SEMDUP_OPENSEARCH_USER", "semdup/devstack", "account the embedded OpenSearch runs as when started by root"),
    ("SEMDUP_JDK_DIRS", "semdup/devstack", "where to look for a Java runtime for the embedded OpenSearch"),
    ("SEMDUP_MAVEN_REPO", "semdup/devstack", "the Maven repository the embedded OpenSearch is assembled from"),
    (
        HANDOFF_ENV,
        "semdup/apps/settings.py",
        "set by semdup serve for its own workers: the resolved tree (not for you)",
    ),
    ("SEMDUP_LOG_JSON", "(retired)", "no longer read; set SEMDUP_LOG_FORMAT=json"),
)

_BY_PATH: dict[str, list[Var]] = {}
for _v in VARIABLES:
    _BY_PATH.setdefault(_v.path, []).append(_v)

# The flat ``reranker:`` section of config files written before the tree: key -> place in the tree.
LEGACY_KEYS: dict[str, str] = {
    "bundle": "model.bundle",
    "calibration": "model.calibration",
    **{k: f"candidates.{k}" for k in ("templates", "variant", "sparse", "knn", "k_candidates", "search_timeout")},
    "field_cache": "candidates.field_cache",
    **{
        k: f"service.{k}"
        for k in (
            "index",
            "indices",
            "api_key",
            "api_keys",
            "auth",
            "max_body_bytes",
            "max_text_chars",
            "max_k",
            "threads",
            "onnx_threads",
            "max_in_flight",
            "workers",
            "ingest",
            "max_ingest_posts",
        )
    },  # fmt: skip
    "session_secret": "review.session_secret",
    "session_max_age": "review.session_max_age",
    "post_url": "review.post_url",
    "review_stats_ttl": "review.stats_ttl",
}


# --- reading a value's text -------------------------------------------------------------------------------------
def _csv(value: Any) -> Any:
    if isinstance(value, str):
        return tuple(t.strip() for t in value.split(",") if t.strip())
    return value


def _read(kind: str, where: str, value: Any) -> Any:
    """A value from the environment (text) or a file (text or YAML/TOML types), in the type its field takes."""
    if kind == "bool":
        return parse_bool(where, value)
    if kind == "auto_bool":
        return parse_auto_bool(where, value)
    if kind == "csv":
        return _csv(value)
    if kind == "api_keys":
        return api_keys_of(value, where)
    return value


def _set(tree: dict[str, Any], path: str, value: Any) -> None:
    node = tree
    *parents, leaf = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value


def _kind_of(path: str) -> str:
    found = _BY_PATH.get(path)
    return found[0].kind if found else "text"


# --- the sources ------------------------------------------------------------------------------------------------
_ENV: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar("semdup_settings_env", default=None)
_DATA: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar("semdup_settings_data", default=None)


def _environ() -> Mapping[str, str]:
    env = _ENV.get()
    return os.environ if env is None else env


def env_values(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The tree's values given by ``env``, and which variable gave each (the first of a path's names that is set)."""
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for var in VARIABLES:
        raw = env.get(var.name, "")
        if var.path in origin or not str(raw).strip():  # empty counts as unset, as it always has
            continue
        _set(values, var.path, _read(var.kind, var.name, raw.strip()))
        origin[var.path] = var.name
    return values, origin


_SECTIONS = (
    "opensearch",
    "broker",
    "model",
    "candidates",
    "service",
    "review",
    "worker",
    "alerts",
    "metrics",
    "logging",
)


def file_values(path: str | Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The tree's values held by the config file at ``path`` (its sections, and the flat ``reranker:`` one)."""
    return mapping_values(load_config_file(path), str(path))


def mapping_values(data: Mapping[str, Any], path: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The tree's values held by ``data``, a config file's content (read from ``path``)."""
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    unknown = sorted(set(data) - set(_SECTIONS) - {"reranker"})
    if unknown:
        raise ConfigError(
            f"unknown section(s) {unknown} in config file {path}; accepted: {', '.join(_SECTIONS)}, reranker"
        )
    for name, section in data.items():
        if section is None:
            continue
        if not isinstance(section, dict):
            raise ConfigError(f"section {name!r} in {path} must be a mapping, got {type(section).__name__}")
        accepted = _accepted(name)
        bad = sorted(set(section) - set(accepted))
        if bad and name == "reranker":
            moved = "; the log format is SEMDUP_LOG_FORMAT=json now" if "log_json" in bad else ""
            raise ConfigError(f"unknown reranker setting(s) {bad} in {path}; accepted: {', '.join(accepted)}{moved}")
        if bad:
            moved = "; the log format is SEMDUP_LOG_FORMAT=json now" if "log_json" in bad else ""
            raise ConfigError(
                f"unknown key(s) {bad} in section {name!r} of {path}; accepted: {', '.join(accepted)}{moved}"
            )
        for key, value in section.items():
            where = LEGACY_KEYS[key] if name == "reranker" else f"{name}.{key}"
            if value is None:
                continue
            _set(values, where, _read(_kind_of(where), f"{key} in section {name!r} of {path}", value))
            origin[where] = f"{path} ({name}.{key})"
    return values, origin


def _accepted(section: str) -> list[str]:
    if section == "reranker":
        return sorted(LEGACY_KEYS)
    return sorted(_field_names(Settings.model_fields[section].annotation))


def _field_names(annotation: Any) -> list[str]:
    for candidate in getattr(annotation, "__args__", (annotation,)):
        if is_dataclass(candidate):
            return [f.name for f in fields(candidate)]
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return list(candidate.model_fields)
    return []


class _EnvSource(PydanticBaseSettingsSource):
    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover - unused
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        return env_values(_environ())[0]


class _FileSource(PydanticBaseSettingsSource):
    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover - unused
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        data = _DATA.get()
        if data is not None:
            return mapping_values(data, "the settings given")[0]
        path = self.current_state.get("config_file")
        return file_values(path)[0] if path else {}


# --- the tree ---------------------------------------------------------------------------------------------------
class Settings(BaseSettings):
    """Every setting of every semdup process, one section per part (module doc). Build it with
    :func:`load_settings`; hand each part down (:meth:`opensearch_settings`, :meth:`service_settings` ...)."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid")

    config_file: str | None = None
    opensearch: OpenSearchSettings | None = None
    broker: BrokerSettings | None = None
    model: ModelSection = ModelSection()
    candidates: RerankerSettings = RerankerSettings(field_cache=50_000)
    service: ServiceSection = ServiceSection()
    review: ReviewSection = ReviewSection()
    worker: WorkerSection = WorkerSection()
    alerts: AlertsSection = AlertsSection()
    metrics: WorkerMetricsSettings = WorkerMetricsSettings()
    logging: LoggingSection = LoggingSection()

    @model_validator(mode="before")
    @classmethod
    def _service_field_cache(cls, data: Any) -> Any:
        """The service keeps 50,000 candidates' fields by default (the dataclass's default, 0, is the library's)."""
        if isinstance(data, dict) and isinstance(data.get("candidates"), dict):
            data["candidates"].setdefault("field_cache", 50_000)
        return data

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, _EnvSource(settings_cls), _FileSource(settings_cls)

    # -- the parts, as the layers below take them --
    def opensearch_settings(self, url: str | None = None) -> OpenSearchSettings:
        """The cluster (``url``, e.g. a ``--opensearch`` option, replaces the configured one).

        Raises:
            OpenSearchUnavailable: no URL anywhere.
        """
        if url:
            return replace(self.opensearch, url=url) if self.opensearch else OpenSearchSettings(url=url)
        if self.opensearch is None:
            raise OpenSearchUnavailable(
                f"no OpenSearch at SEMDUP_OPENSEARCH_URL, OPENSEARCH_URL or a config file; {START_HINT}"
            )
        return self.opensearch

    def broker_settings(self) -> BrokerSettings:
        """The Celery broker.

        Raises:
            BrokerUnavailable: none configured.
        """
        if self.broker is None:
            raise BrokerUnavailable(
                "no broker at SEMDUP_BROKER_URL or a config file; set SEMDUP_BROKER_URL (for a local run, "
                "`semdup broker start` prints the URL of an embedded Redis)"
            )
        return self.broker

    def bundle(self, given: str | None = None, *, what: str = "the worker") -> str:
        """The bundle path: ``given`` (a ``--bundle`` option), else ``model.bundle``.

        Raises:
            ConfigError: neither.
        """
        path = (given or self.model.bundle or "").strip()
        if not path:
            raise ConfigError(
                f"no model bundle for {what}: set SEMDUP_BUNDLE=/path/to/bundle or pass --bundle /path/to/bundle"
            )
        return path

    def service_settings(self) -> ServiceSettings:
        """The HTTP service's part (validated here: an index, a key unless auth is off, the review settings).

        Raises:
            ConfigError: a missing bundle or index, no API key while auth is on, an inconsistent value.
            OpenSearchUnavailable: no cluster configured.
        """
        s, r = self.service, self.review
        for required, value in (("bundle", self.model.bundle), ("index", s.index)):
            if not value:
                raise ConfigError(f"the reranker needs a {required}: set SEMDUP_{required.upper()} or --{required}")
        return ServiceSettings(
            bundle=str(self.model.bundle),
            index=str(s.index),
            opensearch=self.opensearch_settings(),
            reranker=self.candidates,
            api_key=s.api_key,
            auth=s.auth,
            max_body_bytes=s.max_body_bytes,
            max_text_chars=s.max_text_chars,
            max_k=s.max_k,
            threads=s.threads,
            calibration=self.model.calibration,
            indices=s.indices,
            api_keys=s.api_keys,
            onnx_threads=s.onnx_threads,
            broker=self.broker,
            ingest=s.ingest,
            max_ingest_posts=s.max_ingest_posts,
            max_in_flight=s.max_in_flight,
            session_secret=r.session_secret,
            session_max_age=r.session_max_age,
            post_url=r.post_url,
            review_stats_ttl=r.stats_ttl,
        )

    def workers(self) -> int:
        """uvicorn worker processes for ``semdup serve``: ``service.workers``, else one per usable CPU (at most 16)."""
        n = self.service.workers
        if n is None:
            return default_workers()
        if not 1 <= n <= 64:
            raise ConfigError(f"SEMDUP_WORKERS must be a whole number from 1 to 64, got {n}")
        return n

    def alert_settings(self) -> AlertSettings:
        """How the workers flag: the service's candidate paths (no field cache: each post is flagged once)."""
        return AlertSettings(
            k=self.alerts.flag_k, reranker=replace(self.candidates, field_cache=0), calibration=self.model.calibration
        )

    def sweep_settings(self) -> Any:
        """The producers' sweeper (:class:`semdup.indexer.sweeper.SweepSettings`; imported here, it loads Celery)."""
        from semdup.indexer.sweeper import SweepSettings

        return SweepSettings(after_s=self.worker.sweep_after)

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy.within(self.worker.retry_budget, self.worker.visibility_timeout)

    # -- what `semdup config show` prints --
    def explain(self, env: Mapping[str, str] | None = None, cli: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Every leaf of the tree: ``{"value": masked, "source": "cli" | "env NAME" | "file PATH" | "default"}``."""
        env_origin = env_values(os.environ if env is None else env)[1]
        file_origin = file_values(self.config_file)[1] if self.config_file else {}
        out: dict[str, Any] = {}
        for path, value in _leaves(self):
            if cli and path in cli:
                source = "cli"
            elif path in env_origin:
                source = f"env {env_origin[path]}"
            elif path in file_origin:
                source = f"file {file_origin[path]}"
            elif path in ("opensearch.username", "opensearch.password") and value is not None:
                source = "the URL's user part"  # https://user:pass@host: moved out of the URL
            else:
                source = "default"
            out[path] = {"value": _masked(path, value), "source": source}
        return out


def _leaves(settings: Settings) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name in Settings.model_fields:
        section = getattr(settings, name)
        if section is None:
            out += [(f"{name}.{f}", None) for f in _field_names(Settings.model_fields[name].annotation)]
        elif is_dataclass(section):
            out += [(f"{name}.{f.name}", getattr(section, f.name)) for f in fields(section)]
        elif isinstance(section, BaseModel):
            out += [(f"{name}.{f}", getattr(section, f)) for f in type(section).model_fields]
        else:
            out.append((name, section))
    return out


def _masked(path: str, value: Any) -> Any:
    if value is None or value == () or value == "":
        return value if value != () else []
    if path in ("opensearch.url", "broker.url"):
        return redact_url(str(value))
    if path == "service.api_keys":
        return [{"key": "***", "indices": list(k.indices) or ["*"], "scopes": list(k.scopes), "name": k.name}
                for k in value]  # fmt: skip
    if any(v.secret for v in _BY_PATH.get(path, ())):
        return "***"
    if isinstance(value, tuple):
        return list(value)
    return value


# --- reading it -------------------------------------------------------------------------------------------------
def _expected(error: dict[str, Any]) -> str:
    kind = str(error.get("type", ""))
    return {
        "float_parsing": "a number",
        "float_type": "a number",
        "int_parsing": "a whole number",
        "int_type": "a whole number",
        "int_from_float": "a whole number",
        "bool_parsing": "true or false (1/0, yes/no, on/off)",
        "bool_type": "true or false",
        "literal_error": str(error.get("msg", "")).replace("Input should be ", "one of "),
        "string_type": "text",
        "tuple_type": "a list",
        "missing": "a value",
    }.get(kind, str(error.get("msg", "a valid value")))


def _where(path: str, env_origin: Mapping[str, str], file_origin: Mapping[str, str]) -> str:
    if path in env_origin:
        return env_origin[path]
    if path in file_origin:
        return file_origin[path]
    names = [v.name for v in _BY_PATH.get(path, ())]
    return names[0] if names else path


def _config_error(
    exc: ValidationError, env: Mapping[str, str], config_file: str | None, data: Mapping[str, Any] | None = None
) -> ConfigError:
    env_origin = env_values(env)[1]
    try:
        if data is not None:
            file_origin = mapping_values(data, "the settings given")[1]
        else:
            file_origin = file_values(config_file)[1] if config_file else {}
    except ConfigError:
        file_origin = {}
    lines = []
    for error in exc.errors():
        loc = [str(x) for x in error.get("loc", ()) if not str(x).isdigit()]
        path = ".".join(loc[:2])
        where = _where(path, env_origin, file_origin)
        secret = any(v.secret for v in _BY_PATH.get(path, ()))
        found = "a value that is not shown (a secret)" if secret else repr(error.get("input"))[:200]
        hint = next((v.expect for v in _BY_PATH.get(path, ()) if v.expect), "")
        lines.append(f"{where} must be {hint or _expected(error)}, got {found}")
    how = "fix the environment variable or the config file key named"
    return ConfigError("; ".join(lines) + f" ({how})")


def load_settings(
    env: Mapping[str, str] | None = None,
    *,
    config_file: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    data: Mapping[str, Any] | None = None,
) -> Settings:
    """Read the tree: ``overrides`` (``section.field`` -> value, from the CLI; None values are ignored) >
    ``env`` (default: the process environment) > the config file (``config_file``, else ``$SEMDUP_CONFIG``) >
    defaults. ``data`` stands for the config file's content (sections as in a file; embedding and tests). A process
    started by ``semdup serve`` gets the tree its parent resolved (:data:`HANDOFF_ENV`).

    Raises:
        ConfigError: a malformed value, an unknown config key or section, an unreadable config file.
    """
    env = os.environ if env is None else env
    handed = env.get(HANDOFF_ENV)
    if handed and config_file is None and not overrides and data is None:
        return _from_handoff(handed)
    for name, advice in _RETIRED.items():
        if env.get(name):
            logger.warning("%s is no longer read; %s", name, advice)
    given: dict[str, Any] = {}
    if config_file is not None:
        given["config_file"] = str(config_file)
    for path, value in (overrides or {}).items():
        if value is not None:
            _set(given, path, _read(_kind_of(path), f"--{path.rsplit('.', 1)[-1].replace('_', '-')}", value))
    token, data_token = _ENV.set(env), _DATA.set(data)
    try:
        return Settings(**given)
    except ValidationError as exc:
        raise _config_error(exc, env, given.get("config_file") or env.get(CONFIG_ENV), data) from None
    finally:
        _ENV.reset(token)
        _DATA.reset(data_token)


def handoff(settings: Settings) -> str:
    """The resolved tree as one JSON text, for :data:`HANDOFF_ENV` in the environment of ``semdup serve``'s uvicorn
    workers (spawned processes: they read it back with :func:`load_settings`). Secrets are in it as they were in
    the variables it replaces; an environment is readable by its own user only (``/proc/PID/environ``, mode 0400),
    and nothing is written to disk."""
    data = settings.model_dump(mode="json")
    keys = settings.service.api_keys
    data["service"]["api_keys"] = [
        {"key": k.key, "indices": list(k.indices) or "*", "scopes": list(k.scopes), "name": k.name} for k in keys
    ]
    data["config_file"] = None  # already read into the tree
    return json.dumps(data)


def _from_handoff(text: str) -> Settings:
    try:
        data = json.loads(text)
        keys = data.get("service", {}).get("api_keys") or []
        data["service"]["api_keys"] = api_keys_of({k.pop("key"): k for k in keys}, HANDOFF_ENV) if keys else ()
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{HANDOFF_ENV} is not the settings `semdup serve` hands its workers: {exc}") from None
    token = _ENV.set({})
    try:
        return Settings(**data)
    except ValidationError as exc:
        raise ConfigError(f"{HANDOFF_ENV} holds settings that are not valid: {exc.error_count()} error(s)") from None
    finally:
        _ENV.reset(token)


def log_format_setting(env: Mapping[str, str] | None = None) -> str:
    """``logging.format`` alone (environment, else the config file, else text): the CLI sets its logging up with it
    before the whole tree is read, so an error in any other setting is still printed in the asked format.

    Raises:
        ConfigError: a value other than text or json.
    """
    env = os.environ if env is None else env
    if env.get(HANDOFF_ENV):
        try:
            return str(json.loads(env[HANDOFF_ENV])["logging"]["format"])
        except (ValueError, KeyError, TypeError):
            pass
    raw = env.get("SEMDUP_LOG_FORMAT", "").strip().lower()
    if not raw and env.get(CONFIG_ENV):
        try:
            raw = str(file_values(env[CONFIG_ENV])[0].get("logging", {}).get("format", "")).strip().lower()
        except ConfigError:
            raw = ""
    raw = raw or "text"
    if raw not in LOG_FORMATS:
        raise ConfigError(f"SEMDUP_LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}, got {raw!r}; e.g. json")
    return raw


# --- the generated table ----------------------------------------------------------------------------------------
def _default_leaves() -> dict[str, Any]:
    """Every leaf's default; a section that is None by default (no cluster, no broker) shows its fields' own."""
    out = dict(_leaves(_defaults()))
    for name, info in Settings.model_fields.items():
        for candidate in getattr(info.annotation, "__args__", (info.annotation,)):
            if is_dataclass(candidate) and info.default is None:
                for f in fields(candidate):
                    if f.default is not MISSING:
                        out[f"{name}.{f.name}"] = f.default
    return out


def settings_table() -> str:
    """``docs/settings.md``: every variable, where it goes in the tree, its default and meaning (generated)."""
    defaults = _default_leaves()
    lines = [
        "# semdup settings",
        "",
        "Generated by `semdup config table` from `semdup/apps/settings.py`; a test checks this file against it.",
        "Sources, highest first: command-line options, environment variables, the `SEMDUP_CONFIG` file (YAML or",
        "TOML, the sections named in the `setting` column, or the flat `reranker:` section of older files), the",
        "defaults. `semdup config show` prints the effective values (secrets masked) and where each came from.",
        "",
        "| variable | setting | default | meaning |",
        "|---|---|---|---|",
    ]
    for var in VARIABLES:
        default = _masked(var.path, defaults.get(var.path)) if var.path in defaults else None
        shown = "(secret)" if var.secret and var.path != "broker.url" else _show_default(var.path, default)
        lines.append(f"| `{var.name}` | `{var.path}` | {shown} | {var.help.replace('|', chr(92) + '|')} |")
    lines += [
        "",
        "## Read outside the tree",
        "",
        "| variable | read by | meaning |",
        "|---|---|---|",
    ]
    lines += [f"| `{name}` | `{where}` | {help_} |" for name, where, help_ in OTHER_VARIABLES]
    return "\n".join(lines) + "\n"


def _show_default(path: str, value: Any) -> str:
    if path == "service.workers":
        return "usable CPUs, at most 16"
    if path == "service.ingest":
        return "on when a broker is set"
    if path == "candidates.knn":
        return "auto"
    if value is None or value == [] or value == ():
        return "–"
    if isinstance(value, (list, tuple)):
        return "`" + ",".join(str(v) for v in value) + "`"
    return f"`{value}`"


def _defaults() -> Settings:
    token = _ENV.set({})
    try:
        return Settings()
    finally:
        _ENV.reset(token)
