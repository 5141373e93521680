"""``semdup duplicates`` parses, calls list_flags and prints: one line per flag, or one JSON object per line."""

from __future__ import annotations

import json

from click.testing import CliRunner

from semdup.alerts import store
from semdup.cli.duplicates_cmd import duplicates

FLAG = store.Flag("travel", "123", "87", 0.91, 0.8123, "m-1", "2025-01-01T00:00:00+00:00")


def test_flags_are_printed_as_text_or_json_lines(monkeypatch) -> None:
    asked = []
    monkeypatch.setattr("semdup.opensearch_io.clients.connect", lambda settings: "client")
    monkeypatch.setattr(store, "list_flags", lambda client, index, **kw: asked.append((client, index, kw)) or [FLAG])
    monkeypatch.setenv("SEMDUP_OPENSEARCH_URL", "http://localhost:9200")
    out = CliRunner().invoke(duplicates, ["--index", "travel", "--post", "123", "--min-probability", "0.8"])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("post 123: possible duplicate of 87 (p = 0.91, score 0.8123, model m-1")
    assert asked == [("client", "travel", {"post_id": "123", "min_probability": 0.8})]
    out = CliRunner().invoke(duplicates, ["--index", "travel", "--json"])
    assert [json.loads(line) for line in out.output.splitlines()] == [FLAG.to_json()]
    bad = CliRunner().invoke(duplicates, ["--index", "travel", "--min-probability", "2"])
    assert bad.exit_code == 2 and "0.0<=x<=1.0" in bad.output
