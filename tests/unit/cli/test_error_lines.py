"""The CLI's last line on failure: one scrubbed ``Error:`` line (a JSON record in JSON mode), never a traceback for
an OpenSearch error that no semdup layer expected."""

from __future__ import annotations

import json
import logging
import sys
import threading

import pytest
from opensearchpy import exceptions as os_exc

from semdup import cli


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


def test_an_opensearch_error_is_one_error_line(monkeypatch, capsys, restored_root: None) -> None:
    """The client raises semdup's errors (its transport maps opensearch-py's), so a refusal no layer expected still
    ends as one ``Error:`` line with its status and type, exit 1, no traceback."""
    import click

    from semdup.opensearch_io.boundary import client_error

    body = {"error": {"type": "invalid_index_name_exception", "reason": "must not start with '_'"}}
    refused = os_exc.RequestError(400, "invalid_index_name_exception", body)

    @click.command()
    def create() -> None:
        raise client_error(refused, "PUT", "/_travel")

    monkeypatch.setattr(cli, "cli", create)
    with pytest.raises(SystemExit) as done:
        cli.main([])
    assert done.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "Error: OpenSearch refused PUT /_travel (HTTP 400: invalid_index_name_exception: must not start with '_')"
    ], err


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_error_lines_are_scrubbed_in_both_formats(fmt: str, monkeypatch, capsys, restored_root: None) -> None:
    monkeypatch.setenv("SEMDUP_LOG_FORMAT", fmt)
    with pytest.raises(SystemExit) as done:
        cli._fail("the Celery broker at redis://:hunter2@127.0.0.1:6399/7 did not answer; api_key=k-123", 1)
    assert done.value.code == 1
    err = capsys.readouterr().err
    assert "hunter2" not in err and "k-123" not in err and "redis://***@127.0.0.1:6399/7" in err
    if fmt == "json":
        (record,) = [json.loads(line) for line in err.splitlines() if line.strip()]
        assert record["level"] == "ERROR" and record["message"].startswith("Error: the Celery broker")
    else:
        assert err.startswith("Error: the Celery broker") and err.count("\n") == 1
