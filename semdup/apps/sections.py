"""The sections of the settings tree that no lower layer declares (the service, the review page, the workers'
delivery, flagging, logging, the model); the others are the layers' own frozen dataclasses
(:class:`~semdup.core.settings.OpenSearchSettings`, :class:`~semdup.reranker.settings.RerankerSettings`, ...).
Each is a frozen pydantic model: types coerced and checked when the tree is read (:mod:`semdup.apps.settings`).
"""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from semdup.bundle.devices import DEVICES
from semdup.core.errors import ConfigError
from semdup.core.post_rules import MAX_TEXT_CHARS
from semdup.core.settings import BrokerSettings, OpenSearchSettings
from semdup.index_format.layout import IndexLayout
from semdup.indexer.retry import DEFAULT_RETRY_BUDGET
from semdup.indexer.worker_metrics import WorkerMetricsSettings
from semdup.reranker.settings import RerankerSettings
from semdup.service.settings import ApiKey

__all__ = [
    "ModelSection",
    "ServiceSection",
    "ReviewSection",
    "WorkerSection",
    "AlertsSection",
    "LoggingSection",
    "PipelineSection",
    "DEFAULT_VISIBILITY_TIMEOUT",
    "DEFAULT_SWEEP_AFTER",
    "SECTION_TYPES",
]

# The defaults of semdup.ingest.celery_app and .sweeper (modules that import Celery: a test checks they agree)
DEFAULT_VISIBILITY_TIMEOUT = 300  # seconds; celery_app's doc says why it must exceed a task plus a retry wait
DEFAULT_SWEEP_AFTER = 300.0


def proxy_network(
    item: str,
) -> ipaddress.IPv4Address | ipaddress.IPv6Address | ipaddress.IPv4Network | ipaddress.IPv6Network:
    """A trusted proxy as uvicorn reads it: an address, or a network (host bits cleared).

    Raises:
        ValueError: neither.
    """
    item = item.strip()
    return ipaddress.ip_network(item, strict=False) if "/" in item else ipaddress.ip_address(item)


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
    onnx_threads: int = 2
    max_in_flight: int = 4
    workers: int | None = None
    ingest: bool | None = None
    max_ingest_posts: int = 1000
    ops_auth: bool = True
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

    def __repr__(self) -> str:  # keys never in a repr
        shown = self.model_dump(exclude={"api_key", "api_keys"})
        shown["api_key"] = "***" if self.api_key else None
        shown["api_keys"] = self.api_keys  # ApiKey's own repr masks the key
        return "ServiceSection(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"

    __str__ = __repr__


class ReviewSection(_Section):
    """The review page: its session cookies and links to the site."""

    session_secret: str | None = None
    session_max_age: int = 8 * 3600
    session_idle: int = 1800
    post_url: str | None = None
    stats_ttl: float = 60.0

    def __repr__(self) -> str:
        shown = self.model_dump(exclude={"session_secret"})
        return "ReviewSection(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ", session_secret=***)"

    __str__ = __repr__


class WorkerSection(_Section):
    """Delivery of the indexing tasks (redelivery, the retry budget, the producers' sweeper) and what the workers
    encode on: the device (``auto``: CUDA where it can be used, else CPU with one log line; ``cuda``: refuse to
    start without it), the fp16 variant (None: on CUDA where it verifies against fp32), and the CPU cores one
    worker process encodes on (None: all of them; ``semdup worker -c N`` gives each process its share)."""

    visibility_timeout: int = DEFAULT_VISIBILITY_TIMEOUT
    retry_budget: float = DEFAULT_RETRY_BUDGET
    sweep_after: float = DEFAULT_SWEEP_AFTER
    device: Literal["auto", "cpu", "cuda"] = "auto"
    fp16: bool | None = None
    encode_threads: int | None = None

    @field_validator("device", mode="before")
    @classmethod
    def _device(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() not in DEVICES:
            raise ConfigError(f"SEMDUP_DEVICE must be one of {', '.join(DEVICES)}, found {value!r}")
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("encode_threads")
    @classmethod
    def _threads(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= 256:
            raise ConfigError(f"SEMDUP_ENCODE_THREADS must be within 1..256, found {value}; e.g. 2")
        return value

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
    flag_k: int | None = None  # None: the calibration's k (what its threshold was chosen for), else 10

    @field_validator("flag_k")
    @classmethod
    def _k(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= 100:
            raise ConfigError(f"SEMDUP_FLAG_K must be within 1..100, got {value}")
        return value


class LoggingSection(_Section):
    format: Literal["text", "json"] = "text"


class PipelineSection(_Section):
    """semdup inside the site's ``_search`` (``semdup pipeline create``): the service URL the cluster calls, how long
    it waits for it, and what a search does when semdup fails (its own query, or an error)."""

    service_url: str | None = None
    timeout: float = 1.0
    on_failure: Literal["original", "error"] = "original"

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: float) -> float:
        if not 0 < value <= 60:
            raise ConfigError(f"SEMDUP_PIPELINE_TIMEOUT must be seconds within (0, 60], found {value!r}; e.g. 1")
        return value


# Every section of the tree, by the name it has in the tree and in a config file (semdup.apps.settings.Settings
# declares one field per entry, in this order; a test checks they agree).
SECTION_TYPES: dict[str, type] = {
    "opensearch": OpenSearchSettings,
    "broker": BrokerSettings,
    "model": ModelSection,
    "candidates": RerankerSettings,
    "service": ServiceSection,
    "review": ReviewSection,
    "worker": WorkerSection,
    "alerts": AlertsSection,
    "metrics": WorkerMetricsSettings,
    "logging": LoggingSection,
    "pipeline": PipelineSection,
    "indices": IndexLayout,
}
