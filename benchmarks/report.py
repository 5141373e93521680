"""Small pure helpers the benchmarks time and print with: one call's milliseconds, percentiles, byte sizes, a text
table.

Kept apart from the benchmarks (which need OpenSearch, a bundle and a worker) so they can be unit-tested alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["elapsed_ms", "summary", "human_bytes", "format_table", "ratio"]


def elapsed_ms(fn: Callable[[], Any]) -> float:
    """Milliseconds one call of ``fn`` takes (its result is dropped)."""
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000.0


def summary(values: Sequence[float]) -> dict[str, float]:
    """``n``, ``p50``, ``p95``, ``p99``, ``max`` and ``mean`` of ``values`` (numpy's linear percentiles, as
    ``rerank_latency`` reports); all NaN but ``n`` for an empty list, so a mode that measured nothing still prints."""
    x = np.asarray(list(values), dtype=np.float64)
    if x.size == 0:
        nan = float("nan")
        return {"n": 0, "p50": nan, "p95": nan, "p99": nan, "max": nan, "mean": nan}
    return {
        "n": int(x.size),
        "p50": float(np.percentile(x, 50)),
        "p95": float(np.percentile(x, 95)),
        "p99": float(np.percentile(x, 99)),
        "max": float(x.max()),
        "mean": float(x.mean()),
    }


def human_bytes(n: float) -> str:
    """``1536 -> '1.5 KiB'``: sizes as an operator reads them (the exact byte count is printed beside)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"  # pragma: no cover - the loop always returns


def ratio(a: float, b: float) -> str:
    """``a / b`` as ``'1.23x'``, or ``'-'`` when ``b`` is zero or either is missing (NaN)."""
    if not b or a != a or b != b:
        return "-"
    return f"{a / b:.2f}x"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain text table: the first column left-aligned, the others right-aligned, each as wide as its
    widest cell; floats shown with 2 decimals."""

    def cell(v: object) -> str:
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    table = [[cell(h) for h in headers], *[[cell(v) for v in row] for row in rows]]
    n = max(len(r) for r in table)
    table = [r + [""] * (n - len(r)) for r in table]
    widths = [max(len(r[i]) for r in table) for i in range(n)]
    lines = []
    for r in table:
        parts = [r[0].ljust(widths[0])] + [r[i].rjust(widths[i]) for i in range(1, n)]
        lines.append("  ".join(parts).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
