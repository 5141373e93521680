"""The one error hierarchy every semdup part raises.

Lower-layer errors (opensearch-py, redis, onnxruntime, XML parsers) are wrapped at the
boundary with ``raise X(...) from exc`` so callers catch semdup's types only::

    SemdupError                      base; the CLI prints "Error: <message>" and exits 1
    ├── ConfigError                  bad settings, environment or config file
    ├── DataError                    a data file that cannot be read as promised
    │   └── PostError                one post that cannot be indexed or scored (empty, binary)
    ├── OpenSearchUnavailable        cluster down or unreachable (message says how to start one)
    ├── SearchIndexError                  an index that is missing or holds another model's vectors
    ├── BrokerUnavailable            Redis / RabbitMQ down or unreachable
    ├── BundleError                  a model bundle that does not load or whose pieces disagree
    └── BulkWriteError               documents that kept failing after retries (ids + errors kept)

Every message says what was expected, what was found, and how to fix it.
"""

from __future__ import annotations

__all__ = [
    "SemdupError",
    "ConfigError",
    "DataError",
    "PostError",
    "OpenSearchUnavailable",
    "SearchIndexError",
    "BrokerUnavailable",
    "BundleError",
    "BulkWriteError",
]


class SemdupError(Exception):
    """Base of every error semdup raises on purpose."""


class ConfigError(SemdupError):
    """Settings that cannot work: unknown option values, missing credentials, bad config file."""


class DataError(SemdupError):
    """A data file that is missing, unreadable or not of the promised format."""


class PostError(DataError):
    """One post that cannot be used (no title and no body, binary content)."""


class OpenSearchUnavailable(SemdupError):
    """The cluster did not answer; the message tells how to start the embedded one."""


class SearchIndexError(SemdupError):
    """An index that is missing, or whose semdup fields belong to another model version."""


class BrokerUnavailable(SemdupError):
    """The Celery broker (Redis or RabbitMQ) did not answer."""


class BundleError(SemdupError):
    """A model bundle that does not load, or whose pieces disagree with each other."""


class BulkWriteError(SemdupError):
    """Documents that kept failing after retries. ``failures`` holds (id, error) pairs."""

    def __init__(self, message: str, failures: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.failures = failures or []
