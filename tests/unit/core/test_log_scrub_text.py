"""Text log lines are scrubbed like JSON ones: the root handler's, and Celery's task logger in a worker."""

from __future__ import annotations

import io
import logging
import sys
import threading

import pytest

from semdup.core.logs import ScrubbingFormatter, configure_logging


@pytest.fixture
def restored_root() -> None:
    root = logging.getLogger()
    level, hooks = root.level, (sys.excepthook, threading.excepthook)
    yield
    for h in [h for h in root.handlers if getattr(h, "_semdup_handler", False)]:
        root.removeHandler(h)
    root.setLevel(level)
    sys.excepthook, threading.excepthook = hooks
    logging.captureWarnings(False)


def test_text_lines_and_tracebacks_hold_no_credentials(restored_root: None) -> None:
    stream = io.StringIO()
    assert configure_logging(logging.INFO, "text", stream=stream) == "text"
    log = logging.getLogger("semdup.test.text_scrub")
    log.warning("broker %s down", "redis://:hunter2@127.0.0.1:6399/7")
    try:
        raise ConnectionError("GET http://admin:Pl4nted@db:9200/ with X-API-Key: k-51515")
    except ConnectionError:
        log.exception("search failed")
    text = stream.getvalue()
    assert "redis://***@127.0.0.1:6399/7" in text and "http://***@db:9200" in text
    assert "hunter2" not in text and "Pl4nted" not in text and "k-51515" not in text
    assert "Traceback" in text and "WARNING semdup.test.text_scrub: broker" in text


def test_a_workers_task_logger_is_scrubbed_in_text_mode(restored_root: None) -> None:
    from celery import signals

    task_logger = logging.getLogger("semdup.test.celery_text_task_logger")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("[%(levelname)s/task] %(message)s"))  # what Celery installs
    task_logger.addHandler(handler)
    task_logger.propagate = False
    try:
        configure_logging(logging.INFO, "text", stream=io.StringIO(), celery=True)
        signals.after_setup_task_logger.send(sender=None, logger=task_logger, loglevel=logging.INFO)
        task_logger.error("cannot load the client (no OpenSearch at http://u:s3cret@h:9200)")
        assert isinstance(handler.formatter, ScrubbingFormatter)
        assert stream.getvalue() == "[ERROR/task] cannot load the client (no OpenSearch at http://***@h:9200)\n"
    finally:
        task_logger.removeHandler(handler)
