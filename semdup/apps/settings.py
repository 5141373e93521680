"""The one settings tree: every ``SEMDUP_*`` variable and config-file key, read once, typed and validated.

A process reads it once at its start (``semdup`` CLI, the worker app, the HTTP app factory) and hands each part
down as plain arguments; nothing below :mod:`semdup.apps` reads the environment::

    settings = load_settings()                      # environment > $SEMDUP_CONFIG file > defaults
    client = connect(settings.opensearch_settings())
    app = create_app(settings.service_settings())   # the HTTP service's part
    explain(settings, environment())  # settings_report: {"opensearch.url": {"value": ..., "source": "env ..."}, ...}

Sources, highest first: values the CLI passes (``--bundle`` ...), environment variables (:data:`VARIABLES`), one
YAML or TOML config file (``$SEMDUP_CONFIG`` or ``--config``), the defaults. The file holds the tree's sections
(``opensearch:``, ``broker:``, ``model:``, ``candidates:``, ``service:``, ``review:``, ``worker:``, ``alerts:``,
``metrics:``, ``logging:``, ``pipeline:``, ``indices:``) and, as before, a flat ``reranker:`` section (its keys go
where :data:`LEGACY_KEYS` says). Each section is the frozen model of the layer that uses it where one exists
(:class:`~semdup.core.settings.OpenSearchSettings`, :class:`~semdup.service.settings.ServiceSection`, ...), so a
field is declared once, and pydantic (through pydantic-settings) coerces and checks it; a bad value is one
:class:`~semdup.core.errors.ConfigError` naming the variable or file key, what was expected and what was found
(a secret's value never). ``semdup config show`` prints the effective tree with secrets masked and where each value
came from; ``semdup config table`` writes the variable table (``docs/settings.md``, checked by a test).

``semdup serve`` hands the resolved tree to its uvicorn worker processes as one variable, :data:`HANDOFF_ENV`
(JSON; see :func:`handoff`), instead of one variable per setting.

This is the one module that reads the environment. Beside it: :mod:`.variables` (the table of variables),
:mod:`.sections` (the sections no lower layer declares), :mod:`.settings_sources` (values and errors from the
environment and a file), :mod:`.settings_report` (``config show``, ``config table``).
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from semdup.alerts.settings import AlertSettings, AlertsSection
from semdup.apps.sections import (
    DEFAULT_SWEEP_AFTER,
    DEFAULT_VISIBILITY_TIMEOUT,
    LoggingSection,
    ModelSection,
    WorkerSection,
)
from semdup.apps.settings_sources import (
    config_error,
    env_values,
    file_values,
    kind_of,
    mapping_values,
    read_value,
    set_path,
)
from semdup.apps.variables import CONFIG_ENV, HANDOFF_ENV, LEGACY_KEYS, OTHER_VARIABLES, VARIABLES, Var
from semdup.core.errors import BrokerUnavailable, ConfigError, OpenSearchUnavailable
from semdup.core.logs import LOG_FORMATS
from semdup.core.settings import (
    START_HINT,
    BrokerSettings,
    OpenSearchSettings,
)
from semdup.index_format.layout import IndexLayout
from semdup.indexer.retry import RetryPolicy
from semdup.indexer.worker_metrics import WorkerMetricsSettings
from semdup.reranker.settings import RerankerSettings
from semdup.search_pipeline.setup import PipelineSection
from semdup.service.settings import ReviewSection, ServiceSection, ServiceSettings, api_keys_of, default_workers

__all__ = [
    "Settings",
    "load_settings",
    "handoff",
    "log_format_setting",
    "environment",
    "defaults",
    # the table of variables and the sections, for the tree's users (semdup.apps.variables, .sections)
    "Var",
    "VARIABLES",
    "OTHER_VARIABLES",
    "LEGACY_KEYS",
    "HANDOFF_ENV",
    "DEFAULT_VISIBILITY_TIMEOUT",
    "DEFAULT_SWEEP_AFTER",
]

logger = logging.getLogger(__name__)

_RETIRED = {"SEMDUP_LOG_JSON": "set SEMDUP_LOG_FORMAT=json for JSON log lines"}


# --- the sources ------------------------------------------------------------------------------------------------
_ENV: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar("semdup_settings_env", default=None)
_DATA: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar("semdup_settings_data", default=None)


def _environ() -> Mapping[str, str]:
    env = _ENV.get()
    return os.environ if env is None else env


def environment() -> Mapping[str, str]:
    """The environment the tree is read from (this process's): for reports of where each value came from."""
    return _environ()


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
    candidates: RerankerSettings = RerankerSettings()
    service: ServiceSection = ServiceSection()
    review: ReviewSection = ReviewSection()
    worker: WorkerSection = WorkerSection()
    alerts: AlertsSection = AlertsSection()
    metrics: WorkerMetricsSettings = WorkerMetricsSettings()
    logging: LoggingSection = LoggingSection()
    pipeline: PipelineSection = PipelineSection()
    indices: IndexLayout = IndexLayout()

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
        s = self.service
        for required, value in (("bundle", self.model.bundle), ("index", s.index)):
            if not value:
                raise ConfigError(f"the reranker needs a {required}: set SEMDUP_{required.upper()} or --{required}")
        return ServiceSettings(
            **dict(s),  # the service section's fields, its own (the index checked above)
            bundle=self.model.bundle,
            opensearch=self.opensearch_settings(),
            reranker=self.candidates,
            calibration=self.model.calibration,
            broker=self.broker,
            sweep_after=self.worker.sweep_after,
            review=self.review,
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
        return AlertSettings(**dict(self.alerts), reranker=self.candidates, calibration=self.model.calibration)

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy.within(self.worker.retry_budget, self.worker.visibility_timeout)


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
            set_path(given, path, read_value(kind_of(path), f"--{path.rsplit('.', 1)[-1].replace('_', '-')}", value))
    token, data_token = _ENV.set(env), _DATA.set(data)
    try:
        return Settings(**given)
    except ValidationError as exc:
        raise config_error(exc, env, given.get("config_file") or env.get(CONFIG_ENV), data) from None
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
        {"key": k.key, "indices": list(k.indices) or "*", "scopes": list(k.scopes), "name": k.name, "label": k.label}
        for k in keys
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


def defaults() -> Settings:
    """The tree with no variable and no file: every default."""
    token = _ENV.set({})
    try:
        return Settings()
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
