"""``semdup index-posts --input``: what it prints about the records it read and skipped, and how it ends (exit 1
with one ``Error:`` line when records were skipped, beside the job's own reasons). The whole command against a real
OpenSearch, Redis and worker: tests/integration/test_indexer_faults.py."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest

from semdup.cli import input_report


def _file(tmp_path: Path, bad: int) -> Path:
    lines = [json.dumps({"id": str(i), "title": f"Visa question {i}"}).encode() for i in range(30)]
    for n in range(bad):
        lines[n] = json.dumps({"id": "", "title": "no id"}).encode()
    lines[29] = b'{"id": "29", "title": "caf\xff"}'
    path = tmp_path / "posts.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_the_read_is_counted_and_each_skipped_line_named(tmp_path: Path, capsys) -> None:
    path = _file(tmp_path, bad=1)
    read = input_report.read_input(path)
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"read 28 posts from {path} (jsonl), skipped 2 lines:",
        "  line 1: empty id",
        "  line 30: not UTF-8 (byte 0xff at column 27)",
    ]
    assert len(read.posts) == 28


def test_past_twenty_skipped_lines_the_rest_are_counted(tmp_path: Path, capsys) -> None:
    input_report.read_input(_file(tmp_path, bad=25))
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("(jsonl), skipped 26 lines:") and len(out) == 22
    assert out[20] == "  line 20: empty id"
    assert out[21] == "  ... and 6 more (`semdup -v index-posts ...` logs each)"


def test_a_file_whose_every_line_is_refused_stops_before_anything_is_sent(tmp_path: Path, capsys) -> None:
    path = tmp_path / "posts.jsonl"
    path.write_text('{"id": " ", "title": "a"}\n{"id": "2", "title": "<p></p>"}\n')
    refused = r"none of the 2 lines of .* can be indexed .* nothing was enqueued"
    with pytest.raises(click.ClickException, match=refused):
        input_report.read_input(path)
    assert "  line 2: no visible text" in capsys.readouterr().out


def test_skipped_lines_end_the_run_with_exit_1_saying_the_rest_was_written(tmp_path: Path) -> None:
    read = input_report.read_input(_file(tmp_path, bad=1))
    finished: list[bool] = []
    with pytest.raises(click.ClickException) as caught:
        input_report.end_input(read, "written", lambda: finished.append(True))
    assert finished == [True] and caught.value.exit_code == 1
    assert caught.value.message.startswith(
        f"2 lines of {read.path} skipped (listed above) and not indexed; the other 28 posts were written."
    )


def test_parked_posts_and_skipped_lines_make_one_error_line(tmp_path: Path) -> None:
    read = input_report.read_input(_file(tmp_path, bad=1))

    def parked() -> None:
        raise click.ClickException("1 posts parked (above); fix what parked them, then replay")

    with pytest.raises(click.ClickException) as caught:
        input_report.end_input(read, "written", parked)
    message = caught.value.message
    assert message.startswith("1 posts parked (above); fix what parked them, then replay. Also 2 lines of ")
    assert "the other 28 posts were enqueued" in message and "\n" not in message


def test_a_run_without_skipped_lines_ends_as_the_job_does(tmp_path: Path) -> None:
    path = tmp_path / "posts.jsonl"
    path.write_text('{"id": "1", "title": "Visa?"}\n')
    finished: list[bool] = []
    input_report.end_input(input_report.read_input(path), "written", lambda: finished.append(True))
    input_report.end_input(None, "written", lambda: finished.append(True))  # --replay-parked, --job: no input
    assert finished == [True, True]
