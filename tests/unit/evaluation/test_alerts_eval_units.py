"""The alerts evaluation's arithmetic: flags against gold pairs, and the dev choice of k and threshold."""

from __future__ import annotations

import pytest

from semdup.evaluation.alerts_eval import choose_on_dev, flag_scores


def test_precision_and_recall_count_pairs_and_false_flags_of_posts_without_gold() -> None:
    gold = {"10": {"3", "4"}, "11": set(), "12": {"5"}}
    flagged = {"10": {"3", "9"}, "11": {"2"}, "12": set()}
    m = flag_scores(flagged, gold)
    assert (m["flags"], m["true_flags"], m["gold_pairs"], m["posts_flagged"]) == (3, 1, 3, 2)
    assert m["precision"] == pytest.approx(100 / 3) and m["recall"] == pytest.approx(100 / 3)
    assert m["posts"] == 3 and m["posts_with_earlier_duplicate"] == 2
    assert flag_scores({}, {"1": set()})["F1"] == 0.0


def test_dev_choice_maximises_f1_of_the_flags() -> None:
    ranked = {"10": [("3", 0.9), ("9", 0.8), ("4", 0.7)], "11": [("2", 0.6)], "12": [("5", 0.85), ("6", 0.2)]}
    gold = {"10": {"3", "4"}, "11": set(), "12": {"5"}}
    k, threshold, dev = choose_on_dev(ranked, gold, ks=(1, 3))
    # k=3 above 0.6 flags 3, 9, 4 and 5: P 75, R 100, F1 85.7; k=1 between 0.6 and 0.85 only reaches 80
    assert k == 3 and 0.6 < threshold < 0.7
    assert dev["true_flags"] == 3 and dev["flags"] == 4 and dev["F1"] == pytest.approx(600 / 7)


def test_dev_choice_is_the_one_the_former_loop_made() -> None:
    """choose_on_dev's own (k, threshold) loop, now core.fitting.grid_search: the value it returned on main."""
    ranked = {
        "p0": [("a", 0.91), ("b", 0.62), ("c", 0.40)],
        "p1": [("d", 0.88), ("e", 0.85), ("f", 0.30)],
        "p2": [("g", 0.70), ("h", 0.62), ("i", 0.55)],
        "p3": [("j", 0.95), ("k", 0.20), ("l", 0.10)],
        "p4": [("m", 0.50), ("n", 0.45), ("o", 0.40)],
    }
    gold = {"p0": {"a"}, "p1": {"d", "e"}, "p2": {"h"}, "p3": {"j"}, "p4": set()}
    k, threshold, dev = choose_on_dev(ranked, gold)
    assert (k, threshold, dev["F1"], dev["flags"]) == (2, 0.7749999999999999, 88.88888888888889, 4)
