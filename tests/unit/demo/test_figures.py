"""The README's demo table and ``semdup/demo/figures.yaml`` say the same figures (so they cannot drift), and
``semdup demo --check`` names each figure OK, FAIL or SKIP."""

from __future__ import annotations

import re
from pathlib import Path

from semdup.demo.figures import check, load_figures
from semdup.demo.result import DemoResult

README = Path(__file__).resolve().parents[3] / "README.md"
FIGURE = re.compile(r"\d+\.\d\d")


def _readme_table() -> tuple[list[str], dict[str, list[str]]]:
    """The header cells and each row's cells of the README's demo table (the one headed by 'method | Travel test')."""
    lines = README.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| method | Travel test"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].replace("**", "")] = cells[1:]
    return header, rows


def test_every_row_of_the_readmes_demo_table_is_the_figures_file_to_the_digit() -> None:
    figures = load_figures()
    header, rows = _readme_table()
    assert header[1:] == [c["readme"] for c in figures["columns"]]
    seen = set()
    for row in figures["rows"]:
        label = next(name for name in rows if name.startswith(row["readme"]))
        seen.add(label)
        for col, cell in zip(figures["columns"], rows[label], strict=True):
            assert FIGURE.findall(cell) == row.get(col["set"], []), (label, col["set"])
            assert len(row.get(col["set"], [])) in (0, len(col["measures"]))
    assert set(rows) - seen == set(figures["not_rerun"])


def _result_from(figures: dict, skip: str | None = None) -> DemoResult:
    rows: dict = {}
    for row in figures["rows"]:
        for col in figures["columns"]:
            given = row.get(col["set"], [])
            if given and row["method"] != skip:
                rows.setdefault(row["method"], {})[col["set"]] = {m: float(v) for m, v in zip(col["measures"], given)}
    return DemoResult(rows, {}, [], "minilm", skip_neural=False, paper=False)


def test_check_says_ok_fail_or_skip_per_figure() -> None:
    figures = load_figures()
    result = _result_from(figures)
    assert {c.status for c in check(result, {"--learn"}, figures)} == {"OK"}
    result.rows["default"]["travel"]["MAP"] += 0.01
    failed = [c for c in check(result, {"--learn"}, figures) if c.status == "FAIL"]
    assert [(c.method, c.data, c.measure) for c in failed] == [("default", "travel", "MAP")]
    assert failed[0].line().startswith("FAIL default travel MAP: expected ")
    plain = check(_result_from(figures, skip="learned on the site"), set(), figures)
    assert {c.status for c in plain if c.method == "learned on the site"} == {"SKIP"}
    assert {c.status for c in plain if c.method == "bm25"} == {"OK"}
