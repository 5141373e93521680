"""How semdup's processes log: plain text for people, or one JSON object per line for log collectors.

Chosen once at the edge (the ``semdup`` CLI, hence also ``semdup worker`` and ``semdup serve``)::

    SEMDUP_LOG_FORMAT=json semdup worker --bundle /bundles/current     # SEMDUP_LOG_JSON=true works too
    {"time": "2026-11-22T20:01:02.345Z", "level": "INFO", "logger": "semdup.indexer.tasks",
     "message": "index_posts travel: 64 written, 0 parked", "process": 17, ...}

Library code never configures logging (STYLE rule 7); it only logs ids, counts and durations. As a second
line of defence the JSON formatter scrubs what a log collector must not keep: credentials inside URLs
(``redis://:secret@host``), ``password=...``/``api_key: ...``/``Authorization: Bearer ...`` pairs, and the
extra fields that may carry post text (``body``, ``title``, Celery's task ``args``/``kwargs``). Messages are
cut at :data:`MAX_MESSAGE_CHARS` so a stray post body cannot flood the collector.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, TextIO

from semdup.core.errors import ConfigError

__all__ = ["configure_logging", "JsonFormatter", "scrub", "LOG_FORMAT_ENV", "LOG_FORMATS", "MAX_MESSAGE_CHARS"]

logger = logging.getLogger(__name__)

LOG_FORMAT_ENV = "SEMDUP_LOG_FORMAT"
LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
MAX_MESSAGE_CHARS = 2000

# Extra fields never written: they may hold post text (exact names) or secrets (names containing these words).
_TEXT_FIELDS = frozenset({"body", "title", "text", "post", "posts", "payload", "payloads", "args", "kwargs"})
_SECRET_WORDS = ("password", "passwd", "secret", "token", "api_key", "apikey", "authorization", "auth", "credential")
_URL_USERINFO = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@]+@")
_SECRET_PAIR = re.compile(
    r"(?i)\b(password|passwd|pwd|api[_-]?key|secret|token|x-api-key)(\"?'?\s*[:=]\s*\"?'?)([^\s\"',;}&]+)"
)
_BEARER = re.compile(r"(?i)\b(authorization[\"']?\s*[:=]\s*[\"']?(?:bearer|basic)\s+)([^\s\"',;}]+)")
# LogRecord's own attributes; anything else on a record came from ``extra=``.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def scrub(text: str) -> str:
    """``text`` with URL credentials, ``key=secret`` pairs and Authorization values replaced by ``***``."""
    text = _URL_USERINFO.sub(r"\1***@", text)
    text = _BEARER.sub(r"\1***", text)
    return _SECRET_PAIR.sub(r"\1\2***", text)


def _dropped(name: str) -> bool:
    key = name.lower().replace("-", "_")
    return key in _TEXT_FIELDS or any(word in key for word in _SECRET_WORDS)


def _clip(text: str) -> str:
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    return text[:MAX_MESSAGE_CHARS] + f"... [{len(text) - MAX_MESSAGE_CHARS} more characters cut]"


def _clean_extra(value: Any, depth: int = 0) -> Any:
    """A JSON-safe copy of an ``extra=`` value, without the dropped fields, strings scrubbed."""
    if depth > 4:
        return "..."
    if isinstance(value, Mapping):
        return {str(k): _clean_extra(v, depth + 1) for k, v in value.items() if not _dropped(str(k))}
    if isinstance(value, (list, tuple)):
        return [_clean_extra(v, depth + 1) for v in value[:50]]
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    return _clip(scrub(str(value)))


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ms), level, logger, message, process, and scrubbed extras."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=timezone.utc)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": _clip(scrub(record.getMessage())),
            "process": record.process,
            "thread": record.threadName,
        }
        if record.exc_info:
            out["exception"] = _clip(scrub(self.formatException(record.exc_info)))
        elif record.exc_text:
            out["exception"] = _clip(scrub(record.exc_text))
        for key, value in vars(record).items():
            if key in _RECORD_FIELDS or key.startswith("_") or key in out or _dropped(key):
                continue
            out[key] = _clean_extra(value)
        return json.dumps(out, ensure_ascii=False, default=str)


class _CeleryTaskJsonFormatter(JsonFormatter):
    """JSON for Celery's task logger, with the running task's id and name (what Celery's TaskFormatter adds)."""

    def format(self, record: logging.LogRecord) -> str:
        from celery._state import get_current_task

        task = get_current_task()
        if task is not None and task.request:
            record.task_id = task.request.id
            record.task_name = task.name
        return super().format(record)


def _celery_task_logs_as_json(logger: logging.Logger | None = None, **_: Any) -> None:
    """Celery gives its task logger its own text handler (not propagating to root): make that one JSON too."""
    for handler in getattr(logger, "handlers", []):
        handler.setFormatter(_CeleryTaskJsonFormatter())


def _hook_celery_task_logger() -> None:
    try:
        from celery import signals
    except ImportError:  # no Celery, no task logger to fix
        return
    signals.after_setup_task_logger.connect(_celery_task_logs_as_json, weak=False)


class _StderrHandler(logging.StreamHandler):
    """Writes to the stderr of configuration time; if that stream was closed since (a test runner's), to the
    current ``sys.stderr``. Not simply the current one: a Celery worker swaps it for a proxy that logs back here."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        self._configured_stream = sys.stderr

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        for candidate in (self._configured_stream, sys.stderr, sys.__stderr__):
            if candidate is not None and not getattr(candidate, "closed", False):
                return candidate
        return self._configured_stream

    @stream.setter
    def stream(self, value: TextIO) -> None:
        self._configured_stream = value


def _format_from_env(env: Mapping[str, str]) -> str:
    raw = env.get(LOG_FORMAT_ENV, "").strip().lower()
    if not raw:  # the reranker service's switch, SEMDUP_LOG_JSON=true, means the same
        raw = "json" if env.get("SEMDUP_LOG_JSON", "").strip().lower() in ("1", "true", "yes", "on") else "text"
    if raw not in LOG_FORMATS:
        raise ConfigError(f"{LOG_FORMAT_ENV} must be one of {', '.join(LOG_FORMATS)}, got {raw!r}; e.g. json")
    return raw


def configure_logging(
    level: int = logging.WARNING,
    fmt: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    stream: TextIO | None = None,
) -> str:
    """Give the root logger one stderr handler in ``fmt`` (default ``$SEMDUP_LOG_FORMAT``, else text).

    Only the process edge calls this. Calling it again replaces the handler it installed before.

    Returns:
        The format used, ``"text"`` or ``"json"``.

    Raises:
        ConfigError: an unknown format.
    """
    chosen = (fmt or "").strip().lower() or _format_from_env(os.environ if env is None else env)
    if chosen not in LOG_FORMATS:
        raise ConfigError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {chosen!r}")
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_semdup_handler", False)]:
        root.removeHandler(old)
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.setFormatter(JsonFormatter() if chosen == "json" else logging.Formatter(TEXT_FORMAT))
    handler._semdup_handler = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(chosen == "json")  # warnings.warn text would break the one-object-per-line stream
    if chosen == "json":
        _hook_celery_task_logger()
    return chosen
