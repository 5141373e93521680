"""Precision and recall of the flags against the threshold, from the verdicts so far, as an inline SVG's numbers.

For a threshold t on the fused score, the judged pairs scoring at least t are the ones a worker would still flag:
precision = judged duplicates among them / them, recall = judged duplicates among them / all judged duplicates
(:func:`semdup.measures.ranking.precision_recall_f1_accuracy`). Only flagged pairs get verdicts, so both describe the
pairs above the threshold the flags were made with: recall is "of the duplicates confirmed so far", and the chart
says nothing about thresholds below the lowest judged score. The server draws it (:class:`Chart` holds polyline
points as numbers, which the template writes into ``<svg>``), so the page needs no script to show it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from semdup.measures.ranking import precision_recall_f1_accuracy

__all__ = ["Chart", "curve", "chart"]

WIDTH, HEIGHT = 360, 180
LEFT, RIGHT, TOP, BOTTOM = 40, 10, 10, 30
MAX_POINTS = 60


def curve(
    scores: Sequence[float], labels: Sequence[bool], points: int = MAX_POINTS
) -> list[tuple[float, float, float]]:
    """``[(threshold, precision %, recall %)]`` at up to ``points`` thresholds: the judged scores themselves (at
    evenly spaced ranks when there are more), lowest first."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=bool)
    if s.size == 0:
        return []
    values = np.unique(s)
    if values.size > points:
        values = values[np.linspace(0, values.size - 1, points).round().astype(int)]
    out = []
    for t in values:
        m = precision_recall_f1_accuracy(s >= t, y)
        out.append((float(t), m["P"], m["R"]))
    return out


@dataclass(frozen=True)
class Chart:
    """What the template draws: two polylines, the current threshold's x, axis ticks (all numbers)."""

    width: int
    height: int
    precision: str  # "x,y x,y ..."
    recall: str
    threshold_x: float | None
    x_ticks: list[tuple[float, str]]
    y_ticks: list[tuple[float, str]]
    judged: int
    duplicates: int
    plot: tuple[int, int, int, int]  # left, top, right, bottom edges of the plot area


def chart(scores: Sequence[float], labels: Sequence[bool], threshold: float | None) -> Chart | None:
    """The chart of these judged pairs (None when there are none), marking ``threshold`` when it is in range."""
    points = curve(scores, labels)
    if not points:
        return None
    lo, hi = points[0][0], points[-1][0]
    if threshold is not None:
        lo, hi = min(lo, threshold), max(hi, threshold)
    span = hi - lo or 1.0
    x0, x1, y0, y1 = LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM

    def x(t: float) -> float:
        return round(x0 + (t - lo) / span * (x1 - x0), 1)

    def y(pct: float) -> float:
        return round(y1 - pct / 100.0 * (y1 - y0), 1)

    def line(col: int) -> str:
        return " ".join(f"{x(p[0])},{y(p[col])}" for p in points)

    ticks = [lo + span * i / 4 for i in range(5)]
    return Chart(
        width=WIDTH,
        height=HEIGHT,
        precision=line(1),
        recall=line(2),
        threshold_x=None if threshold is None else x(threshold),
        x_ticks=[(x(t), f"{t:.2f}") for t in ticks],
        y_ticks=[(y(p), f"{p}%") for p in (0, 50, 100)],
        judged=len(scores),
        duplicates=int(np.sum(np.asarray(labels, dtype=bool))),
        plot=(x0, y0, x1, y1),
    )
