"""The sections of the settings tree that no lower layer declares (the workers' delivery, logging, the model); the
others are the layers' own frozen models (:class:`~semdup.core.settings.OpenSearchSettings`,
:class:`~semdup.reranker.settings.RerankerSettings`, :class:`~semdup.service.settings.ServiceSection`,
:class:`~semdup.alerts.settings.AlertsSection`, ...).
Each is a frozen pydantic model: types coerced and checked when the tree is read (:mod:`semdup.apps.settings`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from semdup.alerts.settings import AlertsSection
from semdup.bundle.devices import DEVICES
from semdup.core.errors import ConfigError
from semdup.core.settings import BrokerSettings, OpenSearchSettings
from semdup.index_format.layout import IndexLayout
from semdup.indexer.retry import DEFAULT_RETRY_BUDGET
from semdup.indexer.worker_metrics import WorkerMetricsSettings
from semdup.ingest.celery_app import DEFAULT_VISIBILITY_TIMEOUT
from semdup.ingest.sweeper import DEFAULT_SWEEP_AFTER
from semdup.reranker.settings import RerankerSettings
from semdup.search_pipeline.setup import PipelineSection
from semdup.service.settings import ReviewSection, ServiceSection

__all__ = [
    "ModelSection",
    "WorkerSection",
    "LoggingSection",
    "DEFAULT_VISIBILITY_TIMEOUT",
    "DEFAULT_SWEEP_AFTER",
    "SECTION_TYPES",
]


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelSection(_Section):
    """The model bundle every process runs, and its calibration file (None: ``<bundle>.calibration.json``)."""

    bundle: str | None = None
    calibration: str | None = None


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


class LoggingSection(_Section):
    format: Literal["text", "json"] = "text"


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
