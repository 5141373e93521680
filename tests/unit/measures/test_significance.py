"""The paired randomisation test and bootstrap interval: exact small cases, seeds, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from semdup.measures.significance import paired_randomisation_test


def test_four_equal_gains_give_the_exact_one_sided_p_of_one_in_sixteen() -> None:
    t = paired_randomisation_test([50.0, 60.0, 70.0, 80.0], [60.0, 70.0, 80.0, 90.0], n_resamples=20000)
    assert t.mean_difference == pytest.approx(10.0)
    assert (t.wins, t.losses, t.ties) == (4, 0, 0)
    assert t.p_value == pytest.approx(1 / 16, abs=0.01)  # only the all-plus sign vector reaches +10
    assert t.ci_low == t.ci_high == pytest.approx(10.0)


def test_no_difference_is_never_significant_and_a_loss_has_p_near_one() -> None:
    same = paired_randomisation_test([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert same.ties == 3 and same.p_value == pytest.approx(1.0)
    worse = paired_randomisation_test(np.full(40, 80.0), np.full(40, 70.0))
    assert worse.mean_difference == pytest.approx(-10.0) and worse.p_value > 0.99


def test_a_large_consistent_gain_on_many_queries_is_significant() -> None:
    rng = np.random.default_rng(1)
    a = rng.uniform(0, 100, 200)
    b = a + rng.normal(3.0, 5.0, 200)
    t = paired_randomisation_test(a, b)
    assert t.p_value < 0.001 and t.ci_low > 0


def test_the_same_seed_gives_the_same_answer() -> None:
    rng = np.random.default_rng(2)
    a, b = rng.uniform(0, 100, 50), rng.uniform(0, 100, 50)
    # exact: one process, one seed, the same arithmetic twice (numpy's Generator streams are platform-independent)
    assert paired_randomisation_test(a, b, seed=7) == paired_randomisation_test(a, b, seed=7)


@pytest.mark.parametrize(("a", "b"), [([1.0], [1.0, 2.0]), ([], []), ([float("nan")], [1.0])])
def test_bad_inputs_are_refused(a: list[float], b: list[float]) -> None:
    with pytest.raises(ValueError):
        paired_randomisation_test(a, b)
