"""travel_tuning_summary: paired gains by run order, and clear errors for unfinished runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.travel_tuning_summary import dev_figures, main, paired_gain
from semdup.core.errors import DataError


def _run(path: Path, map_: float) -> str:
    path.mkdir(parents=True)
    dev = {"Acc@1": 1.0, "Acc@5": 2.0, "Acc@10": 3.0, "MAP": map_, "MRR": map_ + 0.5, "n_queries": 108}
    (path / "metrics.json").write_text(json.dumps({"dev": dev, "test": None}), encoding="utf-8")
    return str(path)


def test_paired_gain_is_the_mean_difference_with_its_standard_error() -> None:
    gain, se = paired_gain([41.0, 43.0, 40.0], [40.0, 41.0, 40.0])
    assert gain == pytest.approx(1.0)
    assert se == pytest.approx(((0**2 + 1**2 + 1**2) / 2) ** 0.5 / 3**0.5)


def test_main_prints_groups_and_the_gain_over_the_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = [_run(tmp_path / f"b{i}", m) for i, m in enumerate((40.0, 42.0))]
    other = [_run(tmp_path / f"o{i}", m) for i, m in enumerate((41.0, 42.0))]
    main(["--group", "base=" + ",".join(base), "--group", "new=" + ",".join(other)])
    out = capsys.readouterr().out
    assert "base         n=2 MAP mean 41.00" in out
    assert "new          n=2 MAP mean 41.50 sd 0.71  gain +0.50 ± 0.50" in out


def test_an_unfinished_run_is_named_in_the_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="has not finished"):
        dev_figures(tmp_path / "missing")
