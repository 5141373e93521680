"""The precision/recall chart from verdicts: right figures at each threshold, numbers only for the SVG."""

from __future__ import annotations

import re

import pytest

from semdup.review.chart import chart, curve


def test_precision_and_recall_at_each_judged_score() -> None:
    scores = [0.9, 0.8, 0.7, 0.6]
    labels = [True, False, True, False]
    assert curve(scores, labels) == [
        (0.6, pytest.approx(50.0), pytest.approx(100.0)),
        (0.7, pytest.approx(200 / 3), pytest.approx(100.0)),
        (0.8, pytest.approx(50.0), pytest.approx(50.0)),
        (0.9, pytest.approx(100.0), pytest.approx(50.0)),
    ]
    assert len(curve([i / 1000 for i in range(1000)], [i % 2 == 0 for i in range(1000)], points=40)) == 40


def test_the_chart_holds_only_numbers_and_marks_the_threshold() -> None:
    assert chart([], [], 0.5) is None
    c = chart([0.9, 0.8, 0.7, 0.6], [True, False, True, False], 0.75)
    assert c is not None and c.judged == 4 and c.duplicates == 2
    assert c.plot[0] <= c.threshold_x <= c.plot[2]
    for line in (c.precision, c.recall):
        assert re.fullmatch(r"[0-9.]+,[0-9.]+( [0-9.]+,[0-9.]+)*", line)
