"""The flags' precision/recall curve as a standalone SVG (no plotting library: the venv has none, and the review
page draws its own chart the same way, :mod:`semdup.review.chart`).

Each point is one threshold on the fused score, with the top-k flags of a streamed split
(:func:`pr_curve`): x = recall, y = precision, both in percent. The chosen threshold's point
is marked, and the target region (precision >= 50 at recall >= 35, issue #20) is shaded.

    svg = curve_svg(pr_curve(ranked, gold, k=1), chosen=(0.8523, 38.20, 36.18), title="Travel test, k=1")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

from semdup.alerts.choice import Ranked, flag_scores, flags_at
from semdup.measures.fitting import threshold_candidates

__all__ = ["pr_curve", "curve_svg"]

WIDTH, HEIGHT = 520, 380
LEFT, RIGHT, TOP, BOTTOM = 56, 20, 40, 48
MAX_POINTS = 400


def pr_curve(ranked: Ranked, gold: Mapping[str, set[str]], k: int) -> list[tuple[float, float, float]]:
    """``(threshold, precision, recall)`` (percent) of the top-``k`` flags at every threshold between two scores
    seen, highest threshold first (the curve a moderator walks by lowering it)."""
    grid = threshold_candidates([s for cands in ranked.values() for _, s in cands])[::-1]
    out = []
    for t in grid:
        m = flag_scores(flags_at(ranked, k, float(t)), gold)
        out.append((float(t), m["precision"], m["recall"]))
    return out


def curve_svg(
    points: Sequence[tuple[float, float, float]],
    chosen: tuple[float, float, float] | None = None,
    title: str = "",
    target: tuple[float, float] | None = (35.0, 50.0),
) -> str:
    """The SVG text of ``points`` ``(threshold, precision %, recall %)``, highest threshold first.

    Args:
        chosen: ``(threshold, precision, recall)`` to mark (the dev choice, measured on this split).
        title: a line above the plot (escaped).
        target: ``(recall, precision)``: the corner of the shaded target region; None: none.

    Raises:
        ValueError: no points.
    """
    if not points:
        raise ValueError("no points to draw")
    if len(points) > MAX_POINTS:
        step = (len(points) - 1) / (MAX_POINTS - 1)
        points = [points[round(i * step)] for i in range(MAX_POINTS)]
    x0, x1, y0, y1 = LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM

    def x(recall: float) -> float:
        return round(x0 + recall / 100.0 * (x1 - x0), 1)

    def y(precision: float) -> float:
        return round(y1 - precision / 100.0 * (y1 - y0), 1)

    line = " ".join(f"{x(r)},{y(p)}" for _, p, r in points if p > 0 or r > 0)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="13">{escape(title)}</text>',
    ]
    if target is not None:
        tr, tp = target
        parts.append(
            f'<rect x="{x(tr)}" y="{y(100)}" width="{x(100) - x(tr)}" height="{y(tp) - y(100)}" '
            'fill="#2a9d8f" fill-opacity="0.12"/>'
            f'<text x="{x(100) - 4}" y="{y(100) + 14}" text-anchor="end" fill="#2a9d8f">'
            f"target: P &#8805; {tp:g}, R &#8805; {tr:g}</text>"
        )
    for v in range(0, 101, 20):
        parts.append(
            f'<line x1="{x0}" y1="{y(v)}" x2="{x1}" y2="{y(v)}" stroke="#ddd"/>'
            f'<text x="{x0 - 6}" y="{y(v) + 4}" text-anchor="end">{v}</text>'
            f'<line x1="{x(v)}" y1="{y0}" x2="{x(v)}" y2="{y1}" stroke="#ddd"/>'
            f'<text x="{x(v)}" y="{y1 + 16}" text-anchor="middle">{v}</text>'
        )
    parts += [
        f'<rect x="{x0}" y="{y0}" width="{x1 - x0}" height="{y1 - y0}" fill="none" stroke="#444"/>',
        f'<text x="{(x0 + x1) / 2}" y="{HEIGHT - 12}" text-anchor="middle">recall (%)</text>',
        f'<text x="14" y="{(y0 + y1) / 2}" text-anchor="middle" transform="rotate(-90 14 {(y0 + y1) / 2})">'
        "precision (%)</text>",
        f'<polyline points="{line}" fill="none" stroke="#1d3557" stroke-width="2"/>',
    ]
    if chosen is not None:
        t, p, r = chosen
        parts.append(
            f'<circle cx="{x(r)}" cy="{y(p)}" r="5" fill="#e63946"/>'
            f'<text x="{x(r) + 8}" y="{y(p) - 8}" fill="#e63946">threshold {t:.4f}: P {p:.2f}, R {r:.2f}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
