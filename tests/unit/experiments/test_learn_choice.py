"""``experiments.learn_choice``: the old rule takes a hybrid whose gain over the encoder alone is just under p = 0.05,
the clear rule keeps the encoder alone until the interval clears zero, and both gates read the same figures."""

from __future__ import annotations

import numpy as np

from experiments.learn_choice import decide


def _figures(gain: float, noise: float, seed: int = 0) -> dict[str, dict[str, float]]:
    rng = np.random.default_rng(seed)
    current = {f"q{i}": float(v) for i, v in enumerate(rng.uniform(40, 90, 280))}
    encoder = {q: v + 2.0 + float(rng.normal(0, 3)) for q, v in current.items()}
    hybrid = {q: v + gain + float(rng.normal(0, noise)) for q, v in encoder.items()}
    return {"current": current, "encoder": encoder, "carried": dict(encoder), "hybrid": hybrid}


def test_a_clear_gain_is_taken_by_both_rules_and_a_tie_by_neither() -> None:
    clear = decide(_figures(gain=2.0, noise=3.0))
    assert clear["p<0.05"].startswith("hybrid:") and clear["clear"].startswith("hybrid:")
    assert clear["clear"].endswith("accept")
    tie = decide(_figures(gain=0.0, noise=3.0))
    assert tie["clear"].startswith("encoder:") and tie["carried-vs-encoder"].startswith("+0.00")


def test_a_gain_whose_interval_reaches_zero_is_taken_only_by_the_old_rule() -> None:
    for seed in range(40):  # find a draw with p just under 0.05 and an interval that reaches zero
        out = decide(_figures(gain=0.45, noise=3.0, seed=seed))
        low = float(str(out["hybrid-vs-encoder"]).split("[")[1].split(",")[0])
        p = float(str(out["hybrid-vs-encoder"]).split("p=")[1])
        if p < 0.05 and low <= 0:
            assert out["p<0.05"].startswith("hybrid:") and out["clear"].startswith("encoder:")
            return
    raise AssertionError("no draw had p < 0.05 with an interval reaching zero")
