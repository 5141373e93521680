"""How semdup's processes log: plain text for people, or one JSON object per line for log collectors.

One switch, ``SEMDUP_LOG_FORMAT=text|json`` (or ``semdup --log-format``), read once at the edge with the other
settings (:mod:`semdup.apps.settings`): the ``semdup`` CLI, hence ``semdup worker`` (the Celery workers) and
``semdup serve`` (the HTTP service, whose uvicorn workers get it in the settings their parent hands them)::

    SEMDUP_LOG_FORMAT=json semdup worker --bundle /bundles/current
    {"time": "2026-11-22T20:01:02.345Z", "level": "INFO", "logger": "semdup.indexer.tasks",
     "message": "index_posts travel: 64 written, 0 parked", "process": 17, ...}

Every process has one root handler with one formatter. Loggers that other libraries give handlers of their
own are routed through it: uvicorn's (``uvicorn``, ``uvicorn.error``, ``uvicorn.access``) by
:func:`configure_logging`, Celery's task logger through its setup signal. In JSON mode tracebacks are the
``exception`` field of a record, and an uncaught exception is logged as one record instead of printed.

Library code never configures logging (STYLE rule 7); it only logs ids, counts and durations. As a second
line of defence both formatters scrub what must not be kept (:func:`scrub`): credentials inside URLs
(``redis://:secret@host``), ``password=...``/``api_key: ...``/``Authorization: Bearer ...`` pairs; the JSON one
also drops the extra fields that may carry post text (``body``, ``title``, Celery's task ``args``/``kwargs``).
``scrub`` is also what the CLI's ``Error:`` lines and the service's error answers go through. Messages are
cut at :data:`MAX_MESSAGE_CHARS` so a stray post body cannot flood the collector; tracebacks at
:data:`MAX_TRACEBACK_CHARS`, in the middle, so the line naming the error stays.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
from collections.abc import Mapping
from datetime import datetime, timezone
from types import TracebackType
from typing import Any, TextIO

from semdup.core.errors import ConfigError

__all__ = [
    "configure_logging",
    "active_format",
    "JsonFormatter",
    "ScrubbingFormatter",
    "scrub",
    "LOG_FORMAT_ENV",
    "LOG_FORMATS",
    "MAX_MESSAGE_CHARS",
    "SERVER_LOGGERS",
]

logger = logging.getLogger(__name__)

LOG_FORMAT_ENV = "SEMDUP_LOG_FORMAT"
LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
MAX_MESSAGE_CHARS = 2000
MAX_TRACEBACK_CHARS = 8000
# uvicorn's loggers: its default config gives them plain-text handlers that would bypass the root handler.
SERVER_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")

# Extra fields never written: they may hold post text (exact names) or secrets (names containing these words).
_TEXT_FIELDS = frozenset({"body", "title", "text", "post", "posts", "payload", "payloads", "args", "kwargs"})
_SECRET_WORDS = ("password", "passwd", "secret", "token", "api_key", "apikey", "authorization", "auth", "credential")
_URL_USERINFO = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@]+@")
_SECRET_PAIR = re.compile(
    r"(?i)\b(password|passwd|pwd|api[_-]?key|secret|token|x-api-key)(\"?'?\s*[:=]\s*\"?'?)([^\s\"',;}&]+)"
)
_BEARER = re.compile(r"(?i)\b(authorization[\"']?\s*[:=]\s*[\"']?(?:bearer|basic)\s+)([^\s\"',;}]+)")
# A credential object (an ml-commons connector's ``"credential": {"key": ...}``, AWS's ``"credentials": {...}``): every
# value inside it is a secret, whatever its name; the object is masked whole. Quotes may be JSON's, Python's, or
# JSON's escaped inside a string (a body logged as a JSON string).
_CREDENTIAL_OBJECT = re.compile(r"(?i)(\\?[\"']?\b(?:credentials?|secrets?)\\?[\"']?\s*[:=]\s*)\{[^{}]*\}")
# LogRecord's own attributes; anything else on a record came from ``extra=`` (uvicorn's ``color_message``
# repeats the message with terminal colour codes).
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",
}


_PROSE_GOES_ON = re.compile(r" +[^\W\d_]")


def _mask_pair(found: re.Match[str]) -> str:
    """``name: ***`` for a secret; the match as it is when its "value" is the first word of a sentence that goes
    on (``CSRF token: send the page's token``): a lowercase word after ``:`` and a space, followed by another word.
    ``=`` and quoted values are always masked."""
    name, sep, value = found.groups()
    prose = (
        sep.strip() == ":"
        and sep.endswith(" ")
        and value.isalpha()
        and value.islower()
        and _PROSE_GOES_ON.match(found.string, found.end()) is not None
    )
    return found.group() if prose else f"{name}{sep}***"


def scrub(text: str) -> str:
    """``text`` with URL credentials, credential objects (``"credential": {"key": ...}``), ``key=secret`` pairs and
    Authorization values replaced by ``***``; a sentence that merely names a secret (``missing or wrong CSRF token:
    send the page's token``) is left as it is."""
    text = _CREDENTIAL_OBJECT.sub(r"\1{***}", text)  # the whole object: a value's own quotes cannot end the mask
    text = _URL_USERINFO.sub(r"\1***@", text)
    text = _BEARER.sub(r"\1***", text)
    return _SECRET_PAIR.sub(_mask_pair, text)


def _dropped(name: str) -> bool:
    key = name.lower().replace("-", "_")
    return key in _TEXT_FIELDS or any(word in key for word in _SECRET_WORDS)


def _clip(text: str) -> str:
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    return text[:MAX_MESSAGE_CHARS] + f"... [{len(text) - MAX_MESSAGE_CHARS} more characters cut]"


def _clip_traceback(text: str) -> str:
    """A traceback cut in the middle: its first frames and its end, which names the error, are kept."""
    if len(text) <= MAX_TRACEBACK_CHARS:
        return text
    head, tail = MAX_TRACEBACK_CHARS // 4, MAX_TRACEBACK_CHARS - MAX_TRACEBACK_CHARS // 4
    return f"{text[:head]}\n... [{len(text) - head - tail} characters cut] ...\n{text[-tail:]}"


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
            out["exception"] = _clip_traceback(scrub(self.formatException(record.exc_info)))
        elif record.exc_text:
            out["exception"] = _clip_traceback(scrub(record.exc_text))
        for key, value in vars(record).items():
            if key in _RECORD_FIELDS or key.startswith("_") or key in out or _dropped(key):
                continue
            out[key] = _clean_extra(value)
        return json.dumps(out, ensure_ascii=False, default=str)


class ScrubbingFormatter(logging.Formatter):
    """Text log lines (message and traceback) passed through :func:`scrub`; ``inner`` formats them first
    (default: ``logging.Formatter(fmt)``), so another library's formatter can be wrapped."""

    def __init__(self, fmt: str | None = TEXT_FORMAT, inner: logging.Formatter | None = None) -> None:
        super().__init__(fmt)
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        return scrub(self.inner.format(record) if self.inner is not None else super().format(record))


class _CeleryTaskJsonFormatter(JsonFormatter):
    """JSON for Celery's task logger, with the running task's id and name (what Celery's TaskFormatter adds)."""

    def format(self, record: logging.LogRecord) -> str:
        from celery._state import get_current_task

        task = get_current_task()
        if task is not None and task.request:
            record.task_id = task.request.id
            record.task_name = task.name
        return super().format(record)


def _celery_task_logs_as_ours(logger: logging.Logger | None = None, **_: Any) -> None:
    """Celery gives its task logger its own text handler (not propagating to root): make that one JSON in JSON
    mode, and scrubbed in text mode."""
    json_mode = active_format() == "json"
    for handler in getattr(logger, "handlers", []):
        current = handler.formatter
        if json_mode:
            handler.setFormatter(_CeleryTaskJsonFormatter())
        elif not isinstance(current, ScrubbingFormatter):
            handler.setFormatter(ScrubbingFormatter(inner=current or logging.Formatter(TEXT_FORMAT)))


def _celery_pool_logs_as_ours(**_: Any) -> None:
    """Celery gives the pool's ``multiprocessing`` logger (billiard's: "Process 'ForkPoolWorker-1' exited with
    signal 15", not propagating) a text handler of its own: make it JSON in JSON mode, scrubbed in text mode."""
    _celery_task_logs_as_ours(logging.getLogger("multiprocessing"))


def _hook_celery_task_logger() -> None:
    try:
        from celery import signals
    except ImportError:  # no Celery, no task logger to fix
        return
    signals.after_setup_task_logger.connect(_celery_task_logs_as_ours, weak=False)
    signals.after_setup_logger.connect(_celery_pool_logs_as_ours, weak=False)


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


def active_format() -> str | None:
    """The format of the handler :func:`configure_logging` installed in this process, None before it ran."""
    for handler in logging.getLogger().handlers:
        if getattr(handler, "_semdup_handler", False):
            return getattr(handler, "_semdup_format", None)
    return None


def _route_server_loggers() -> None:
    """uvicorn's loggers that got handlers of their own (its default config) write through the root handler
    instead. One without handlers is left alone: it propagates already, or uvicorn switched it off
    (``access_log=False`` leaves ``uvicorn.access`` without handlers and not propagating)."""
    for name in SERVER_LOGGERS:
        server_logger = logging.getLogger(name)
        if server_logger.handlers:
            for handler in list(server_logger.handlers):
                server_logger.removeHandler(handler)
            server_logger.propagate = True


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, exc, tb)
        return
    logging.getLogger("semdup").critical("uncaught %s: %s", kind.__name__, exc, exc_info=(kind, exc, tb))


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is None or isinstance(args.exc_value, SystemExit):
        return
    name = args.thread.name if args.thread is not None else "?"
    logging.getLogger("semdup").critical(
        "uncaught %s in thread %s: %s",
        args.exc_type.__name__,
        name,
        args.exc_value,
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
    )


def _hook_uncaught(json_mode: bool) -> None:
    """JSON mode: an uncaught exception becomes one record, not a traceback printed beside the JSON lines."""
    if json_mode:
        sys.excepthook, threading.excepthook = _log_uncaught, _log_uncaught_in_thread
        return
    if sys.excepthook is _log_uncaught:
        sys.excepthook = sys.__excepthook__
    if threading.excepthook is _log_uncaught_in_thread:
        threading.excepthook = threading.__excepthook__


def configure_logging(
    level: int = logging.WARNING,
    fmt: str | None = None,
    *,
    stream: TextIO | None = None,
    celery: bool | None = None,
) -> str:
    """Give the root logger one stderr handler in ``fmt`` (``text`` or ``json``; default text). The edge passes the
    format of the settings tree (``SEMDUP_LOG_FORMAT``, :func:`semdup.apps.settings.log_format_setting`).

    Only the process edge calls this. Calling it again replaces the handler it installed before. uvicorn's
    loggers are routed through that handler too (their levels are left as they are).

    ``celery``: also format Celery's task logger (JSON, or scrubbed text) once a worker sets it up; default: in
    JSON mode, or where Celery is imported already (importing it only to look costs ~0.2 s per command).

    Returns:
        The format used, ``"text"`` or ``"json"``.

    Raises:
        ConfigError: an unknown format.
    """
    chosen = (fmt or "").strip().lower() or "text"
    if chosen not in LOG_FORMATS:
        raise ConfigError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {chosen!r}")
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_semdup_handler", False)]:
        root.removeHandler(old)
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.setFormatter(JsonFormatter() if chosen == "json" else ScrubbingFormatter())
    handler._semdup_handler = True  # type: ignore[attr-defined]
    handler._semdup_format = chosen  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    _route_server_loggers()
    logging.captureWarnings(chosen == "json")  # warnings.warn text would break the one-object-per-line stream
    _hook_uncaught(chosen == "json")
    if celery or (celery is None and (chosen == "json" or "celery" in sys.modules)):
        _hook_celery_task_logger()
    return chosen
