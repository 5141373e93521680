"""The precision/recall curve SVG: well-formed, every point inside the plot, the chosen point marked, text escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from experiments.flag_curve import HEIGHT, WIDTH, curve_svg, pr_curve

NS = "{http://www.w3.org/2000/svg}"


def test_the_curve_walks_thresholds_downwards_recall_never_falling() -> None:
    ranked = {"10": [("3", 0.9), ("9", 0.8), ("4", 0.7)], "11": [("2", 0.6)], "12": [("5", 0.85), ("6", 0.2)]}
    points = pr_curve(ranked, {"10": {"3", "4"}, "11": set(), "12": {"5"}}, k=3)
    thresholds = [t for t, _, _ in points]
    recalls = [r for _, _, r in points]
    assert thresholds == sorted(thresholds, reverse=True)
    assert recalls == sorted(recalls) and recalls[0] == 0.0 and recalls[-1] == 100.0
    assert points[-1][1] == pytest.approx(50.0)  # everything flagged: 3 of 6 flags are gold


def test_the_svg_draws_the_curve_inside_the_plot_and_marks_the_chosen_point() -> None:
    ranked = {"10": [("3", 0.9), ("9", 0.8)], "11": [("2", 0.6)], "12": [("5", 0.85)]}
    points = pr_curve(ranked, {"10": {"3"}, "11": set(), "12": {"5"}}, k=1)
    svg = ET.fromstring(curve_svg(points, chosen=(0.7, 66.67, 100.0), title="a <b> & c"))
    line = svg.find(f"{NS}polyline").get("points").split()
    xy = [tuple(map(float, p.split(","))) for p in line]
    assert len(xy) == len(points) - 1  # the highest threshold flags nothing: no point at (0, 0)
    assert all(0 <= x <= WIDTH and 0 <= y <= HEIGHT for x, y in xy)
    assert svg.find(f"{NS}circle") is not None
    texts = [t.text for t in svg.iter(f"{NS}text")]
    assert "a <b> & c" in texts and any("threshold 0.7000: P 66.67, R 100.00" in (t or "") for t in texts)


def test_a_long_curve_is_thinned_and_an_empty_one_refused() -> None:
    points = [(1.0 - i / 1000, 50.0, i / 10) for i in range(1001)]
    svg = ET.fromstring(curve_svg(points, target=None))
    assert len(svg.find(f"{NS}polyline").get("points").split()) == 400
    with pytest.raises(ValueError, match="no points"):
        curve_svg([])


def test_the_alerts_run_writes_its_test_curve_and_refuses_without_the_candidates(tmp_path) -> None:
    from experiments.alerts_eval import AlertsRun, write_curve

    run = AlertsRun("m-1", "bm25", 1, 0.7, {}, {}, {"precision": 50.0, "recall": 100.0})
    with pytest.raises(ValueError, match="kept no test candidates"):
        write_curve(run, tmp_path / "c.svg")
    run.test_ranked, run.test_gold = {"10": [("3", 0.9)], "11": [("2", 0.8)]}, {"10": ["3"], "11": []}
    svg = ET.fromstring(write_curve(run, tmp_path / "c.svg").read_text(encoding="utf-8"))
    assert svg.find(f"{NS}circle") is not None and "k=1" in "".join(t.text or "" for t in svg.iter(f"{NS}text"))
