"""The research scripts that front training functions: bad options exit 2, library errors one line and exit 1."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from experiments import pretrain_rcnn, tscqa


def test_tscqa_refuses_a_data_set_without_a_ranking_protocol(tmp_path: Path) -> None:
    res = CliRunner().invoke(tscqa.main, ["--checkpoint", str(tmp_path), "--data", "askubuntu"])
    assert res.exit_code == 2 and "'askubuntu' is not one of 'semeval', 'travel'" in res.output


def test_tscqa_reports_a_missing_checkpoint_in_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(tscqa.main, ["--checkpoint", str(tmp_path / "none"), "--data", "semeval"])
    assert res.exit_code == 1
    (line,) = res.output.strip().splitlines()
    assert line.startswith(f"Error: {tmp_path / 'none'} is not a semdup checkpoint") and "semdup train" in line


def test_pretrain_rcnn_refuses_a_set_without_a_value(tmp_path: Path) -> None:
    res = CliRunner().invoke(pretrain_rcnn.main, ["--out", str(tmp_path / "pt.pt"), "--set", "hidden_dim"])
    assert res.exit_code == 2 and "expected key=value, got 'hidden_dim'" in res.output
    assert not (tmp_path / "pt.pt").exists()
