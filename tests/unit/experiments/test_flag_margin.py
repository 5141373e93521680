"""experiments/flag_margin: the margin rule flags only a clear first candidate, and the dev choice honours the
precision floor."""

from __future__ import annotations

import pytest

from experiments.flag_margin import choose, flags


def test_a_first_candidate_close_to_the_second_is_not_flagged() -> None:
    ranked = {"9": [["3", 0.9], ["4", 0.88]], "8": [["1", 0.9], ["2", 0.5]], "7": [["5", 0.95]], "6": []}
    assert flags(ranked, 0.8, 0.05) == {"9": set(), "8": {"1"}, "7": {"5"}, "6": set()}


def test_the_dev_choice_keeps_precision_at_the_floor_or_refuses() -> None:
    # 8 and 7 are right; 9's first candidate is wrong and only a margin tells it apart
    ranked = {"9": [["3", 0.9], ["4", 0.89]], "8": [["1", 0.85], ["2", 0.5]], "7": [["5", 0.8], ["6", 0.4]]}
    gold = {"9": {"4"}, "8": {"1"}, "7": {"5"}}
    t, m = choose(ranked, gold, min_precision=100.0)
    assert flags(ranked, t, m) == {"9": set(), "8": {"1"}, "7": {"5"}} and m > 0
    with pytest.raises(SystemExit, match="no rule of the grid"):
        choose({"9": [["3", 0.9]]}, {"9": {"4"}}, min_precision=50.0)
