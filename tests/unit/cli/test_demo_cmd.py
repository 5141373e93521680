"""``semdup demo`` only parses, calls :func:`semdup.demo.run.run` and prints: its table, then with ``--check`` one
OK / FAIL / SKIP line per README figure and exit 1 on a FAIL. The library is replaced here (no cluster); the run
itself is ``semdup demo --check``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import semdup.cli.edge as edge
import semdup.demo.run as demo_run
from semdup.cli.demo_cmd import demo
from semdup.demo.figures import load_figures
from semdup.demo.result import DemoResult


def _figures_result(shift: float = 0.0) -> DemoResult:
    """A result holding the figures file's own values (``shift`` added to the default's Travel MAP)."""
    figures, rows = load_figures(), {}
    for row in figures["rows"]:
        for col in figures["columns"]:
            given = row.get(col["set"], [])
            if given:
                rows.setdefault(row["method"], {})[col["set"]] = {m: float(v) for m, v in zip(col["measures"], given)}
    rows["default"]["travel"]["MAP"] += shift
    return DemoResult(rows, {}, [], "minilm", skip_neural=False, paper=False, results_file=Path("r.json"))


@pytest.fixture
def fake_library(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    seen: dict[str, Any] = {"shift": 0.0}
    monkeypatch.setattr(demo_run, "ensure_opensearch", lambda configured: "http://127.0.0.1:9")
    monkeypatch.setattr(edge, "client", lambda url: "client")

    def run(workdir: Path, client: Any, url: str, **kw: Any) -> DemoResult:
        seen.update(kw, client=client, url=url)
        return _figures_result(seen["shift"])

    monkeypatch.setattr(demo_run, "run", run)
    monkeypatch.delenv("SEMDUP_OPENSEARCH_URL", raising=False)
    monkeypatch.delenv("SEMDUP_BROKER_URL", raising=False)
    return seen


def test_check_prints_the_table_then_one_line_per_figure(fake_library: dict[str, Any]) -> None:
    got = CliRunner().invoke(demo, ["--check", "--workdir", "w"])
    assert got.exit_code == 0, got.output
    assert fake_library["client"] == "client" and fake_library["learn"] is False and fake_library["broker"] is None
    assert "default (hybrid minilm)" in got.output and "OK   default travel MAP: expected 48.14, got 48.14" in got.output
    assert "SKIP learned on the site semeval MAP" in got.output


def test_a_figure_that_moved_fails_the_check(fake_library: dict[str, Any]) -> None:
    fake_library["shift"] = -0.02
    got = CliRunner().invoke(demo, ["--check", "--learn", "--workdir", "w"])
    assert got.exit_code == 1
    assert "FAIL default travel MAP: expected 48.14, got 48.12" in got.output and "30 OK, 1 FAIL, 0 SKIP" in got.output


@pytest.mark.parametrize("args", [["--check", "--skip-neural"], ["--check", "--base-encoder", "mpnet"],
                                  ["--review", "--paper"], ["--learn", "--skip-neural"]])
def test_flags_that_cannot_go_together_are_usage_errors(args: list[str]) -> None:
    assert CliRunner().invoke(demo, args).exit_code == 2
