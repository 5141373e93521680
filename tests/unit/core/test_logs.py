"""JSON logs: every line parses, carries level/logger/message, and holds no password, API key or post body."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from semdup.core.errors import ConfigError
from semdup.core.logs import (
    MAX_MESSAGE_CHARS,
    MAX_TRACEBACK_CHARS,
    JsonFormatter,
    active_format,
    configure_logging,
    scrub,
)


@pytest.fixture
def json_log() -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("semdup.test.json_log")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    yield log, stream
    log.removeHandler(handler)


def _lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_line_parses_with_fields(json_log: tuple[logging.Logger, io.StringIO]) -> None:
    log, stream = json_log
    log.info("index_posts %s: %d written, %d parked", "travel", 64, 0, extra={"index": "travel", "written": 64})
    (line,) = _lines(stream)
    assert line["level"] == "INFO"
    assert line["logger"] == "semdup.test.json_log"
    assert line["message"] == "index_posts travel: 64 written, 0 parked"
    assert line["index"] == "travel" and line["written"] == 64
    assert line["time"].endswith("Z")


def test_no_password_in_messages_extras_or_tracebacks(json_log: tuple[logging.Logger, io.StringIO]) -> None:
    log, stream = json_log
    log.warning("broker at redis://:hunter2secret@redis:6379/0 did not answer")
    log.warning("connecting to https://admin:Pa55w0rd@search.example.org:9200 with password=Pa55w0rd")
    log.info("request", extra={"password": "Pa55w0rd", "api_key": "k-123456", "headers": {"X-Api-Key": "k-123456"}})
    log.info("call with Authorization: Bearer k-123456 and api_key=k-123456")
    try:
        raise RuntimeError("login failed for amqp://user:hunter2secret@rabbit//")
    except RuntimeError:
        log.exception("worker could not start")
    text = stream.getvalue()
    for secret in ("hunter2secret", "Pa55w0rd", "k-123456"):
        assert secret not in text
    lines = _lines(stream)
    assert len(lines) == 5
    assert "redis://***@redis:6379/0" in lines[0]["message"]
    assert "https://***@search.example.org:9200" in lines[1]["message"]
    assert "RuntimeError" in lines[4]["exception"]


def test_post_text_fields_and_celery_args_are_dropped(json_log: tuple[logging.Logger, io.StringIO]) -> None:
    log, stream = json_log
    body = "My visa application was refused twice, what should I do"
    log.error(
        "Task %s failed",
        "semdup.indexer.index_posts",
        extra={"data": {"id": "abc", "args": [["travel", [{"id": "1", "body": body}]]], "kwargs": {}}, "body": body},
    )
    (line,) = _lines(stream)
    assert body not in json.dumps(line)
    assert line["data"] == {"id": "abc"}


def test_long_message_is_cut(json_log: tuple[logging.Logger, io.StringIO]) -> None:
    log, stream = json_log
    log.info("x" * (MAX_MESSAGE_CHARS * 3))
    (line,) = _lines(stream)
    assert len(line["message"]) < MAX_MESSAGE_CHARS + 100
    assert "more characters cut" in line["message"]


def test_long_traceback_keeps_the_line_naming_the_error(json_log: tuple[logging.Logger, io.StringIO]) -> None:
    log, stream = json_log

    cause: BaseException | None = None
    for step in range(200):  # a long chain of causes: a traceback of some 20,000 characters
        try:
            raise KeyError(f"step {step}") from cause
        except KeyError as exc:
            cause = exc
    try:
        raise LookupError("the part that names the error, api_key=k-424242") from cause
    except LookupError:
        log.exception("failed")
    (line,) = _lines(stream)
    assert len(line["exception"]) < MAX_TRACEBACK_CHARS + 100 and "characters cut" in line["exception"]
    assert line["exception"].startswith("Traceback (most recent call last):") and "step 0" in line["exception"]
    assert line["exception"].endswith("LookupError: the part that names the error, api_key=***")


def test_scrub_leaves_plain_text() -> None:
    assert scrub("indexed 64 posts into http://opensearch:9200/travel") == (
        "indexed 64 posts into http://opensearch:9200/travel"
    )


def test_scrub_masks_secrets_but_not_a_sentence_that_names_one() -> None:
    said = "missing or wrong CSRF token: send the page's token in X-CSRF-Token"
    assert scrub(said) == said  # was "CSRF token: *** the page's token"
    assert scrub("password: hunter2 for admin") == "password: *** for admin"
    assert scrub("password: swordfish") == "password: ***" and scrub("api_key=send the") == "api_key=*** the"
    assert scrub('{"token": "Zq9x-41"}') == '{"token": "***"}' and scrub("secret: Abc def") == "secret: *** def"


def test_scrub_masks_credential_objects_in_every_quoting() -> None:
    """An ml-commons connector body (``semdup -vv pipeline create`` logs the request) holds its key under
    ``"credential": {"key": ...}``: the whole object is masked, as JSON, as a Python repr, and escaped in a string."""
    key = "pipeline-key-4b1d-9a7e-0c3f5e2a"
    bodies = [
        json.dumps({"name": "semdup-travel", "credential": {"key": key}, "protocol": "http"}),
        json.dumps({"credential": {"key": key}}, indent=2),
        repr({"credential": {"key": key, "region": "eu"}}),
        json.dumps(json.dumps({"credential": {"key": key}})),  # a body logged as a JSON string
        json.dumps({"credentials": {"access_key": key, "secret_key": key}}),
        json.dumps({"credential": {"key": 'a"b\\"' + key}}),  # quotes inside the key cannot end the mask
    ]
    for body in bodies:
        assert key not in scrub(body), body
    assert scrub(bodies[0]) == '{"name": "semdup-travel", "credential": {***}, "protocol": "http"}'


def test_configure_logging_format_from_env_and_bad_value() -> None:
    from semdup.apps.settings import load_settings, log_format_setting

    root = logging.getLogger()
    before = list(root.handlers), root.level
    try:
        stream = io.StringIO()
        fmt = log_format_setting({"SEMDUP_LOG_FORMAT": "json"})
        assert configure_logging(logging.INFO, fmt, stream=stream) == "json"
        logging.getLogger("semdup.test.env").info("hello")
        assert json.loads(stream.getvalue().splitlines()[-1])["message"] == "hello"
        assert configure_logging(logging.INFO, log_format_setting({}), stream=io.StringIO()) == "text"
        retired = io.StringIO()  # the service's old second switch is not read any more: one variable
        fmt = log_format_setting({"SEMDUP_LOG_JSON": "true"})
        assert configure_logging(logging.INFO, fmt, stream=retired) == "text"
        load_settings(env={"SEMDUP_LOG_JSON": "true"})  # the tree says so once, when it is read
        assert "SEMDUP_LOG_JSON is no longer read; set SEMDUP_LOG_FORMAT=json" in retired.getvalue()
        with pytest.raises(ConfigError, match="SEMDUP_LOG_FORMAT must be one of text, json"):
            log_format_setting({"SEMDUP_LOG_FORMAT": "xml"})
        with pytest.raises(ConfigError, match="log format must be one of text, json"):
            configure_logging(logging.INFO, "xml")
    finally:
        for h in list(root.handlers):
            if getattr(h, "_semdup_handler", False):
                root.removeHandler(h)
        root.setLevel(before[1])


@pytest.fixture
def root_logging() -> None:
    """Put back the root logger, uvicorn's loggers and the exception hooks a test's configure_logging changed."""
    root = logging.getLogger()
    loggers = [logging.getLogger(n) for n in ("uvicorn", "uvicorn.error", "uvicorn.access")]
    saved = [(lg, list(lg.handlers), lg.propagate) for lg in loggers]
    level, hooks = root.level, (sys.excepthook, threading.excepthook)
    yield
    for h in [h for h in root.handlers if getattr(h, "_semdup_handler", False)]:
        root.removeHandler(h)
    root.setLevel(level)
    for lg, handlers, propagate in saved:
        lg.handlers[:] = handlers
        lg.propagate = propagate
    sys.excepthook, threading.excepthook = hooks
    logging.captureWarnings(False)


def test_uvicorn_loggers_go_through_the_one_formatter(root_logging: None) -> None:
    """uvicorn's default config gives its loggers plain-text handlers; in JSON mode their records, tracebacks
    included, come out as scrubbed JSON lines of the root handler instead. An access log uvicorn switched off
    (no handler, not propagating) stays off."""
    own = io.StringIO()
    server = logging.getLogger("uvicorn")
    server.addHandler(logging.StreamHandler(own))  # what uvicorn's LOGGING_CONFIG installs
    server.propagate = False
    access = logging.getLogger("uvicorn.access")
    access.handlers, access.propagate = [], False  # uvicorn's access_log=False
    stream = io.StringIO()
    configure_logging(logging.INFO, "json", stream=stream)
    logging.getLogger("uvicorn.error").info("Uvicorn running on http://127.0.0.1:8080 (Press CTRL+C to quit)")
    try:
        raise RuntimeError("upstream refused http://admin:Pl4nted@db:9200 with api_key=k-777777")
    except RuntimeError as exc:
        logging.getLogger("uvicorn.error").error("Exception in ASGI application\n", exc_info=exc)
    assert own.getvalue() == "" and not access.hasHandlers()
    started, failed = _lines(stream)
    assert started["logger"] == "uvicorn.error" and started["message"].startswith("Uvicorn running on")
    assert "RuntimeError" in failed["exception"] and "api_key=***" in failed["exception"]
    assert "Pl4nted" not in stream.getvalue() and "k-777777" not in stream.getvalue()
    assert active_format() == "json"


def test_uncaught_exceptions_are_json_records_in_json_mode_only(root_logging: None) -> None:
    stream = io.StringIO()
    configure_logging(logging.WARNING, "json", stream=stream)
    try:
        raise ValueError("token=Sup3rS3cret went missing")
    except ValueError as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)  # what Python calls for an exception nobody caught
    thread = threading.Thread(target=lambda: 1 / 0, name="probe")
    thread.start()
    thread.join()
    main, in_thread = _lines(stream)
    assert main["level"] == "CRITICAL" and "ValueError" in main["exception"] and "Sup3rS3cret" not in stream.getvalue()
    assert "ZeroDivisionError" in in_thread["exception"] and "probe" in in_thread["message"]
    configure_logging(logging.WARNING, "text", stream=io.StringIO())
    assert sys.excepthook is sys.__excepthook__ and threading.excepthook is threading.__excepthook__


def test_cli_logs_json_lines_without_credentials(tmp_path) -> None:
    """The real ``semdup`` CLI with SEMDUP_LOG_FORMAT=json: its log lines on stderr are JSON, with no password."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "SEMDUP_CACHE": str(tmp_path / "cache"),
        "SEMDUP_LOG_FORMAT": "json",
        "SEMDUP_OPENSEARCH_URL": "http://admin:Sup3rS3cret@127.0.0.1:1",  # nothing listens on port 1
        "SEMDUP_OPENSEARCH_TIMEOUT": "2",
        "SEMDUP_OPENSEARCH_MAX_RETRIES": "0",
    }
    code = "import sys; from semdup.cli import main; main(sys.argv[1:])"
    proc = subprocess.run(
        [sys.executable, "-c", code, "-vv", "index-posts", "--index", "x", "--list-parked"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "Error: no OpenSearch at http://127.0.0.1:1" in proc.stderr
    assert "Sup3rS3cret" not in proc.stderr + proc.stdout
    log_lines = [line for line in proc.stderr.splitlines() if line.startswith("{")]
    assert log_lines, proc.stderr[-2000:]
    for line in log_lines:
        record = json.loads(line)
        assert {"time", "level", "logger", "message"} <= set(record)


def test_json_mode_reaches_celerys_own_task_logger(root_logging: None) -> None:
    """Celery gives ``celery.task`` its own text handler; in JSON mode its lines are JSON too (Celery's signal)."""
    from celery import signals

    root = logging.getLogger()
    level = root.level
    task_logger = logging.getLogger("semdup.test.celery_task_logger")
    task_stream, root_stream = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(task_stream)
    handler.setFormatter(logging.Formatter("[%(asctime)s: %(levelname)s] %(message)s"))  # what Celery installs
    task_logger.addHandler(handler)
    task_logger.propagate = False
    try:
        configure_logging(logging.INFO, "json", stream=root_stream)
        signals.after_setup_task_logger.send(sender=None, logger=task_logger, loglevel=logging.INFO)
        task_logger.info("index_posts travel: 64 written via redis://:hunter2@redis:6379/0")
        (line,) = [json.loads(x) for x in task_stream.getvalue().splitlines()]
        assert line["message"] == "index_posts travel: 64 written via redis://***@redis:6379/0"
    finally:
        task_logger.removeHandler(handler)
        logging.captureWarnings(False)
        for h in list(root.handlers):
            if getattr(h, "_semdup_handler", False):
                root.removeHandler(h)
        root.setLevel(level)


_LOGGING_PROBE_APP = """
import logging, os
from celery import Celery
from celery.utils.log import get_task_logger

app = Celery("logprobe", broker=os.environ["PROBE_BROKER"], set_as_current=False)
app.conf.update(task_default_queue=os.environ["PROBE_QUEUE"], accept_content=["json"], task_ignore_result=True,
                worker_hijack_root_logger=False)
task_logger = get_task_logger("semdup.indexer.tasks")

@app.task(name="semdup.indexer.logprobe")
def logprobe(posts):
    task_logger.info("logprobe: %d posts via redis://:hunter2@redis:6379/0", len(posts))
    logging.getLogger("semdup.indexer.batch_writer").warning("bulk write of %d posts took a while", len(posts))
    raise ValueError("logprobe fails on purpose")
"""


@pytest.mark.broker
def test_real_celery_worker_writes_json_lines_only(tmp_path, redis_url: str) -> None:
    """A real prefork Celery worker started the way ``semdup worker`` starts it (logging configured first, JSON):
    every stderr line parses, and neither the password nor the post body in the task's arguments shows up."""
    import os
    import signal
    import time
    import uuid

    (tmp_path / "logprobe_app.py").write_text(_LOGGING_PROBE_APP)
    queue = f"logprobe-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, SEMDUP_LOG_FORMAT="json", PROBE_BROKER=redis_url, PROBE_QUEUE=queue)
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env.get("PYTHONPATH", "")
    code = (
        "import logging; from semdup.core.logs import configure_logging; "
        "from semdup.apps.settings import log_format_setting; configure_logging(logging.INFO, log_format_setting()); "
        "import logprobe_app; logprobe_app.app.worker_main(['worker', '--pool=prefork', '--concurrency=2', "
        f"'--queues={queue}', '--without-mingle', '--without-gossip', '--loglevel=INFO'])"
    )
    err = open(tmp_path / "worker.err", "wb")
    worker = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=err,
        start_new_session=True,
    )
    body = "Secret itinerary: Lisbon to Porto by night train, which ticket do I need"
    try:
        from celery import Celery

        sender = Celery("sender", broker=redis_url, set_as_current=False)
        sender.send_task("semdup.indexer.logprobe", args=[[{"id": "1", "title": "Trains", "body": body}]], queue=queue)
        deadline = time.monotonic() + 90  # waiting for the worker, not a timing assertion
        while time.monotonic() < deadline and "logprobe fails on purpose" not in (tmp_path / "worker.err").read_text():
            assert worker.poll() is None, (tmp_path / "worker.err").read_text()[-3000:]
            time.sleep(0.5)
        # a pool process killed under the worker (the OOM killer, a stop that signals the whole group): the parent
        # logs it on billiard's own logger, which must write JSON too (it did not, one run in a few)
        children = Path(f"/proc/{worker.pid}/task/{worker.pid}/children").read_text().split()
        os.kill(int(children[0]), signal.SIGKILL)
        while time.monotonic() < deadline and "exited with" not in (tmp_path / "worker.err").read_text():
            time.sleep(0.5)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=10)
        err.close()
    text = (tmp_path / "worker.err").read_text()
    records = [json.loads(line) for line in text.splitlines() if line.strip()]  # every line is JSON
    messages = " ".join(r["message"] for r in records)
    assert "logprobe: 1 posts via redis://***@redis:6379/0" in messages
    assert "bulk write of 1 posts took a while" in messages
    assert any(r["level"] == "ERROR" and "logprobe fails on purpose" in r["message"] for r in records)
    assert any(r.get("task_name") == "semdup.indexer.logprobe" for r in records)
    assert "hunter2" not in text and "Lisbon to Porto" not in text
    assert any("exited with" in r["message"] and r["level"] == "ERROR" for r in records)  # billiard's, as JSON
