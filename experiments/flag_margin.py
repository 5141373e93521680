"""Does a margin over the second candidate lift flag precision? k = 1 plus a margin, chosen on dev, tested once.

Input: the streamed candidates ``python -m experiments.alerts_eval --ranked FILE`` writes (each dev and test
post's top 10 against the posts before it, in creation order, with the gold). The rule flags a post's first
candidate when its fused score s1 >= t and s1 - s2 >= m (s2: the second candidate's, none: -inf). Chosen on dev,
fixed before test is read: the (t, m) of the grid with the highest dev F1 among the rules whose dev precision is at
least ``--min-precision`` (the issue's target, 50); ties: the first found (smaller m, then higher t). Test is then
scored once with it, beside ``alerts_eval``'s own dev choice (k and threshold by dev F1, no margin).

    python -m experiments.alerts_eval --bundle B --own-node --ranked /tmp/ranked.json
    python -m experiments.flag_margin /tmp/ranked.json
"""

from __future__ import annotations

import argparse
import json
import math

from semdup.alerts.choice import flag_scores, flags_at

MARGINS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.08, 0.1)


def flags(ranked: dict[str, list[list]], t: float, m: float) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for post, cands in ranked.items():
        s1 = cands[0][1] if cands else -math.inf
        s2 = cands[1][1] if len(cands) > 1 else -math.inf
        out[post] = {cands[0][0]} if cands and s1 >= t and s1 - s2 >= m else set()
    return out


def choose(ranked: dict[str, list[list]], gold: dict[str, set[str]], min_precision: float) -> tuple[float, float]:
    tops = sorted({c[0][1] for c in ranked.values() if c}, reverse=True)
    grid = [(a + b) / 2 for a, b in zip(tops[:-1], tops[1:], strict=True)] + [tops[-1] - 1.0]
    best: tuple[float, float, float] | None = None
    for m in MARGINS:
        for t in grid:
            s = flag_scores(flags(ranked, t, m), gold)
            if s["precision"] >= min_precision and (best is None or s["F1"] > best[0] + 1e-12):
                best = (s["F1"], t, m)
    if best is None:
        raise SystemExit(f"no rule of the grid reaches dev precision {min_precision}")
    return best[1], best[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ranked", help="alerts_eval --ranked output")
    ap.add_argument("--min-precision", type=float, default=50.0)
    args = ap.parse_args()
    with open(args.ranked, encoding="utf-8") as f:
        d = json.load(f)
    dev_gold = {p: set(g) for p, g in d["dev_gold"].items()}
    t, m = choose(d["dev_ranked"], dev_gold, args.min_precision)
    test_gold = {p: set(g) for p, g in d["test_gold"].items()}
    rows = (
        (f"margin rule, k=1, t={t:.4f}, m={m:.2f}", lambda r: flags(r, t, m)),
        (f"alerts_eval's choice, k={d['k']}, t={d['threshold']:.4f}", lambda r: flags_at(r, d["k"], d["threshold"])),
    )
    for name, rule in rows:
        dev = flag_scores(rule(d["dev_ranked"]), dev_gold)
        test = flag_scores(rule(d["test_ranked"]), test_gold)
        print(
            f"{name} | dev P {dev['precision']:.2f} R {dev['recall']:.2f} ({dev['flags']} flags) | "
            f"test P {test['precision']:.2f} R {test['recall']:.2f} ({test['flags']} flags)"
        )


if __name__ == "__main__":
    main()
