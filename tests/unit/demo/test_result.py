"""The demo's table as ``semdup demo`` prints it: the default, the learned row and the peer first, ``{:9.2f}``
figures, ``-`` for a figure the run did not measure, the dev block only with the neural rows."""

from __future__ import annotations

from semdup.demo.result import LEARNED, DemoResult

TRAVEL = {"MAP": 48.144999, "MRR": 48.91, "Acc@1": 36.8, "Acc@5": 61.9, "Acc@10": 74.46}


def test_the_table_puts_the_default_first_and_prints_two_decimals_or_a_dash() -> None:
    rows = {"bm25": {"askubuntu": {"Acc": 79.3}}, "peer": {}, LEARNED: {}, "default": {"travel": TRAVEL}}
    lines = DemoResult(rows, {}, ["a note"], "minilm", skip_neural=False, paper=False).table_lines()
    names = [line.split("  ")[0] for line in lines[2:6]]
    assert names == ["default (hybrid minilm)", LEARNED, "minilm alone (peer)", "bm25"]
    assert lines[2].split()[3:8] == ["48.14", "48.91", "36.80", "61.90", "74.46"]
    assert lines[5].split()[1:] == ["-"] * 8 + ["79.30"]
    assert "a note" in lines and any(line.startswith("\nDev (every choice") for line in lines)


def test_without_the_neural_rows_there_is_no_dev_block_and_the_figure_reads_none() -> None:
    result = DemoResult({"bm25": {"travel": TRAVEL}}, {}, [], "minilm", skip_neural=True, paper=True)
    assert not any(line.startswith("\nDev") for line in result.table_lines())
    assert "except BOW-CNN on Travel above" in result.table_lines()[-4]
    assert result.figure("bm25", "travel", "MAP") == TRAVEL["MAP"] and result.figure("bm25", "semeval", "MAP") is None
