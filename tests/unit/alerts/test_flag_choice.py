"""The flagging choice on held-out posts (k, threshold, Platt as one calibration) and where a worker's k comes from."""

from __future__ import annotations

import json

import pytest

from semdup.alerts.choice import choose_on_dev, fit_flagging, flag_scores, flags_at
from semdup.alerts.settings import DEFAULT_K, AlertSettings, resolve_k
from semdup.core.errors import BundleError
from semdup.reranker.calibration import Calibration, load_calibration, save_calibration

RANKED = {"10": [("3", 0.9), ("9", 0.8), ("4", 0.7)], "11": [("2", 0.6)], "12": [("5", 0.85), ("6", 0.2)]}
GOLD = {"10": {"3", "4"}, "11": set(), "12": {"5"}}


def test_the_calibration_records_the_k_and_threshold_chosen_on_dev_and_flags_as_measured() -> None:
    k, threshold, dev = choose_on_dev(RANKED, GOLD, ks=(1, 3))
    cal = fit_flagging(RANKED, GOLD, "toy dev", ks=(1, 3))
    assert (cal.k, cal.threshold) == (k, threshold) == (3, pytest.approx(0.65))
    # a worker with this calibration flags the top cal.k at cal.threshold: exactly the dev figure
    assert flag_scores(flags_at(RANKED, cal.k, cal.threshold), GOLD) == dev
    assert (cal.n, cal.positives) == (6, 3) and cal.a > 0  # Platt on every listed candidate: higher = likelier
    assert cal.fitted_on.startswith("toy dev; k=3")


def test_a_first_best_tie_keeps_the_smaller_k() -> None:
    ranked = {"9": [("3", 0.9), ("4", 0.5)], "8": [("1", 0.4)]}
    assert fit_flagging(ranked, {"9": {"3"}, "8": set()}, "toy").k == 1


def test_nothing_to_choose_on_is_an_error() -> None:
    with pytest.raises(ValueError, match="no held-out post has a candidate"):
        fit_flagging({"1": []}, {"1": set()}, "empty")


def test_k_comes_from_flag_k_then_the_calibration_then_ten() -> None:
    cal = Calibration(a=1.0, b=0.0, threshold=0.7, k=1)
    assert resolve_k(AlertSettings(flag_k=5), cal) == 5
    assert resolve_k(AlertSettings(), cal) == 1
    assert resolve_k(AlertSettings(), Calibration(a=1.0, b=0.0)) == DEFAULT_K == resolve_k(AlertSettings(), None)


def test_the_k_survives_the_calibration_file_and_a_bad_one_is_refused(tmp_path) -> None:
    path = tmp_path / "b.calibration.json"
    save_calibration(path, "m-1", Calibration(a=2.0, b=-1.0, threshold=0.7, k=2))
    assert load_calibration(path, "m-1").k == 2
    table = json.loads(path.read_text())
    del table["m-1"]["k"]  # a file written before k was recorded still loads, with none
    path.write_text(json.dumps(table))
    assert load_calibration(path, "m-1").k is None
    table["m-1"]["k"] = 0
    path.write_text(json.dumps(table))
    with pytest.raises(BundleError, match="k must be a whole number within 1..100"):
        load_calibration(path, "m-1")
