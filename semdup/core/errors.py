"""The one error hierarchy every semdup part raises.

Lower-layer errors (opensearch-py, redis, onnxruntime, XML parsers) are wrapped at the
boundary with ``raise X(...) from exc`` so callers catch semdup's types only. OpenSearch's are mapped in one
place, inside the client (:mod:`semdup.opensearch_io.boundary`), so no call site ever sees an opensearch-py type::

    SemdupError                      base; the CLI prints "Error: <message>" and exits 1
    ├── ConfigError                  bad settings, environment or config file
    ├── DataError                    a data file that cannot be read as promised
    │   └── PostError                one post that cannot be indexed or scored (empty, binary)
    ├── OpenSearchError              what OpenSearch (or the way to it) answered: status, error type, reason
    │   ├── OpenSearchUnavailable    transient: no answer, or HTTP 429 / 502 / 503 / 504 (retry later)
    │   │   └── SearchTimeout        no answer within the request timeout
    │   └── OpenSearchRefused        refused for good, with its status (400, 401, 403, 409, 413, 500...)
    │       └── OpenSearchMissing    404: no such index, document or template (also a SearchIndexError)
    ├── SearchIndexError             an index that is missing or holds another model's vectors
    ├── BrokerUnavailable            Redis / RabbitMQ down or unreachable
    ├── BundleError                  a model bundle that does not load or whose pieces disagree
    └── BulkWriteError               documents that kept failing after retries (their ItemFailures kept)

Every message says what was expected, what was found, and how to fix it.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "SemdupError",
    "ConfigError",
    "DataError",
    "PostError",
    "OpenSearchError",
    "OpenSearchUnavailable",
    "SearchTimeout",
    "OpenSearchRefused",
    "OpenSearchMissing",
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


class OpenSearchError(SemdupError):
    """What OpenSearch, or the way to it, answered. Decisions read ``status`` (None: no answer at all) and
    ``type`` (OpenSearch's error type, e.g. ``cluster_block_exception``; the client's for no answer), never the
    message text; ``reason`` is OpenSearch's own words."""

    def __init__(self, message: str, *, status: int | None = None, type: str | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.status, self.type, self.reason = status, type, reason

    def advising(self, advice: str) -> OpenSearchError:
        """The same error with ``advice`` (what to do, where it was met) after its message; raise it ``from`` this."""
        return self.__class__(f"{self}; {advice}", status=self.status, type=self.type, reason=self.reason)


class OpenSearchUnavailable(OpenSearchError):
    """Transient: the cluster did not answer, or answered 429 / 502 / 503 / 504. Worth retrying later; the message
    tells how to start the embedded one when nothing answered."""


class SearchTimeout(OpenSearchUnavailable):
    """OpenSearch did not answer within the request timeout (the service answers 504)."""


class OpenSearchRefused(OpenSearchError):
    """OpenSearch refused the request for good (a bad request, credentials, a conflict, a write block...);
    ``status`` says which."""


class SearchIndexError(SemdupError):
    """An index that is missing, or whose semdup fields belong to another model version."""


class OpenSearchMissing(OpenSearchRefused, SearchIndexError):
    """404: the index, document or stored template asked for does not exist."""


class BrokerUnavailable(SemdupError):
    """The Celery broker (Redis or RabbitMQ) did not answer."""


class BundleError(SemdupError):
    """A model bundle that does not load, or whose pieces disagree with each other."""


class BulkWriteError(SemdupError):
    """Documents that kept failing after retries. ``failures`` holds their
    :class:`~semdup.opensearch_io.boundary.ItemFailure` records (id, status, type, reason)."""

    def __init__(self, message: str, failures: list[Any] | None = None) -> None:
        super().__init__(message)
        self.failures = failures or []
