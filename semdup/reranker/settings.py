"""Settings of the reranker and its HTTP service: one frozen dataclass, read at the edge (CLI, app factory).

Sources, highest first: environment variables, the ``reranker:`` section of the config file
(``$SEMDUP_CONFIG``, YAML or TOML, the :mod:`semdup.core.settings` pattern), then the defaults below::

    SEMDUP_BUNDLE               the model bundle (directory or .tar.gz)            required
    SEMDUP_INDEX                the index to search                                 required
    SEMDUP_TEMPLATES            comma-separated lexical models (bm25,lmj,dfr,ib)    bm25
    SEMDUP_TEMPLATE_VARIANT     text (title + body) or title                        text
    SEMDUP_SPARSE / SEMDUP_KNN  add learned-sparse / k-NN candidates                false
    SEMDUP_K_CANDIDATES         candidates per retrieval path                       100
    SEMDUP_API_KEY              the key clients send in X-API-Key                   required unless auth off
    SEMDUP_AUTH                 "off" turns access control off (explicitly)         on
    SEMDUP_MAX_BODY_BYTES       request bodies above this get 413                   1 MiB
    SEMDUP_MAX_TEXT_CHARS       title + body above this get 400                     100000
    SEMDUP_SEARCH_TIMEOUT       seconds per OpenSearch call from the reranker       5
    SEMDUP_THREADS              worker threads for blocking OpenSearch calls        8
    SEMDUP_FIELD_CACHE          candidates' stored fields kept in memory (0 = off)   50000

OpenSearch itself (URL, auth, TLS) comes from :class:`semdup.core.settings.OpenSearchSettings`; the log format
from ``SEMDUP_LOG_FORMAT``, as for every semdup process (:mod:`semdup.core.logs`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from semdup.core.errors import ConfigError
from semdup.core.settings import OpenSearchSettings, load_config_file, parse_bool
from semdup.index_format.schema import LEXICAL_MODELS
from semdup.search_templates import VARIANTS

__all__ = ["RerankerSettings", "ServiceSettings"]

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class RerankerSettings:
    """How the reranker finds candidates; everything that changes which candidates a call sees.

    Args:
        templates: lexical models whose stored templates give candidates; the first one gives the lexical
            score that T-SCQA's lexnorm normalises.
        variant: ``text`` (match title + body) or ``title``.
        sparse: add learned-sparse candidates (rank_feature dot product on ``semdup.terms``).
        knn: add k-NN candidates on ``semdup.vector`` (needs a ``knn_vector`` mapping).
        k_candidates: candidates per retrieval path (1..1000).
        search_timeout: seconds allowed for each OpenSearch call.
        field_cache: candidates whose stored fields are kept in memory (exact, version-checked; 0 = off).
    """

    templates: tuple[str, ...] = ("bm25",)
    variant: str = "text"
    sparse: bool = False
    knn: bool = False
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


@dataclass(frozen=True)
class ServiceSettings:
    """Everything ``create_app`` needs; build it with :meth:`from_env` at the edge, then pass it down."""

    bundle: str
    index: str
    opensearch: OpenSearchSettings
    reranker: RerankerSettings = RerankerSettings()
    api_key: str | None = None
    auth: bool = True
    max_body_bytes: int = 1 << 20
    max_text_chars: int = 100_000
    max_k: int = 100
    threads: int = 8
    calibration: str | None = None

    def __post_init__(self) -> None:
        if self.auth and not self.api_key:
            raise ConfigError(
                "the reranking service refuses to start without an API key: set SEMDUP_API_KEY (clients send it "
                "in the X-API-Key header), or set SEMDUP_AUTH=off explicitly to serve without access control"
            )
        if self.max_body_bytes < 1024 or self.max_text_chars < 1 or self.max_k < 1 or self.threads < 1:
            raise ConfigError(
                f"max_body_bytes >= 1024, max_text_chars >= 1, max_k >= 1 and threads >= 1 are needed; got "
                f"{self.max_body_bytes}, {self.max_text_chars}, {self.max_k}, {self.threads}"
            )

    def __repr__(self) -> str:
        shown = {f.name: getattr(self, f.name) for f in fields(self)}
        if shown["api_key"]:
            shown["api_key"] = "***"
        return "ServiceSettings(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"

    __str__ = __repr__

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
            "templates": "SEMDUP_TEMPLATES",
            "variant": "SEMDUP_TEMPLATE_VARIANT",
            "sparse": "SEMDUP_SPARSE",
            "knn": "SEMDUP_KNN",
            "k_candidates": "SEMDUP_K_CANDIDATES",
            "api_key": "SEMDUP_API_KEY",
            "auth": "SEMDUP_AUTH",
            "max_body_bytes": "SEMDUP_MAX_BODY_BYTES",
            "max_text_chars": "SEMDUP_MAX_TEXT_CHARS",
            "search_timeout": "SEMDUP_SEARCH_TIMEOUT",
            "threads": "SEMDUP_THREADS",
            "calibration": "SEMDUP_CALIBRATION",
            "field_cache": "SEMDUP_FIELD_CACHE",
        }
        for key, var in env_names.items():
            if env.get(var):
                values[key] = env[var]
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.from_mapping(values, OpenSearchSettings.from_env(config_file, env), source=str(path or "env"))

    @classmethod
    def from_mapping(
        cls, values: Mapping[str, Any], opensearch: OpenSearchSettings, source: str = ""
    ) -> ServiceSettings:
        """Build from plain values (strings from the environment are parsed here)."""
        known = {f.name for f in fields(RerankerSettings)} | {f.name for f in fields(cls)}
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
                knn=parse_bool("knn", values.get("knn", False)),
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
                max_text_chars=int(values.get("max_text_chars", 100_000)),
                max_k=int(values.get("max_k", 100)),
                threads=int(values.get("threads", 8)),
                calibration=str(values["calibration"]) if values.get("calibration") else None,
            )
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"a reranker setting is not a number where one is needed ({source}): {exc}") from exc
