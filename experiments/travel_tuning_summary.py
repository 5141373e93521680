"""Seed summary of training runs: each run's dev figures, each group's mean and spread, paired gains.

Why: on Travel dev (108 queries) one run's MAP moves by 1–3 points with the seed, so a setting is
judged by its mean over seeds and by its gain over the base *paired by seed* (same seed, same data
order), with the standard error of those paired gains. It only reads ``metrics.json`` of finished
runs (``semdup train ... --dev-only``); nothing is trained or scored here, and test is not read.

Run::

    python -m experiments.travel_tuning_summary \\
        --group base=artifacts/bow-cnn-travel-v2,artifacts/travel-tuning/B0_s1 \\
        --group ema97=artifacts/travel-tuning/E97_s0,artifacts/travel-tuning/E97_s1

The first group is the base; the i-th run of every other group is paired with the base's i-th run.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
from collections.abc import Sequence
from pathlib import Path

from semdup.core.errors import DataError

__all__ = ["dev_figures", "paired_gain", "main"]

logger = logging.getLogger(__name__)

MEASURES = ("Acc@1", "Acc@5", "Acc@10", "MAP", "MRR")


def dev_figures(run_dir: str | Path) -> dict[str, float]:
    """The ``dev`` figures of a finished run's ``metrics.json``."""
    path = Path(run_dir, "metrics.json")
    try:
        dev = json.loads(path.read_text(encoding="utf-8"))["dev"]
    except FileNotFoundError as exc:
        raise DataError(f"{path} is missing: the run has not finished (or the path is wrong)") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{path} has no readable 'dev' figures: {exc}") from exc
    return {k: float(dev[k]) for k in MEASURES}


def paired_gain(values: Sequence[float], base: Sequence[float]) -> tuple[float, float]:
    """(mean, standard error) of ``values[i] - base[i]`` over the pairs both have (SE 0 for one pair)."""
    diffs = [v - b for v, b in zip(values, base, strict=False)]
    if not diffs:
        raise DataError("no run pairs with the base group; give runs in the same seed order")
    se = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else 0.0
    return statistics.mean(diffs), se


def _parse_group(text: str) -> tuple[str, list[str]]:
    name, sep, dirs = text.partition("=")
    runs = [d for d in dirs.split(",") if d]
    if not sep or not name or not runs:
        raise argparse.ArgumentTypeError(f"expected NAME=DIR[,DIR...], got {text!r}")
    return name, runs


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--group", type=_parse_group, action="append", required=True, help="NAME=DIR[,DIR...]")
    ap.add_argument("--metric", default="MAP", choices=MEASURES, help="the measure of means and gains")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    groups = [(name, [(d, dev_figures(d)) for d in dirs]) for name, dirs in args.group]
    base = [f[args.metric] for _, f in groups[0][1]]
    print(f"# dev {' / '.join(MEASURES)}; group lines: {args.metric} mean, sd and gain over "
          f"{groups[0][0]} paired by run order (mean ± SE)")
    for name, runs in groups:
        for d, f in runs:
            print(f"  {name:<10} {d:<44} {' / '.join(f'{f[k]:.2f}' for k in MEASURES)}")
        vals = [f[args.metric] for _, f in runs]
        sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
        line = f"{name:<12} n={len(vals)} {args.metric} mean {statistics.mean(vals):.2f} sd {sd:.2f}"
        if name != groups[0][0]:
            gain, se = paired_gain(vals, base)
            line += f"  gain {gain:+.2f} ± {se:.2f}"
        print(line)


if __name__ == "__main__":
    main()
