"""The alerts evaluation's arithmetic: flags against gold pairs, and the dev choice of k and threshold."""

from __future__ import annotations

import pytest

from experiments.alerts_eval import choose_on_dev, flag_scores


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
    """choose_on_dev's own (k, threshold) loop, now measures.fitting.grid_search: the value it returned on main."""
    ranked = {
        "p0": [("a", 0.91), ("b", 0.62), ("c", 0.40)],
        "p1": [("d", 0.88), ("e", 0.85), ("f", 0.30)],
        "p2": [("g", 0.70), ("h", 0.62), ("i", 0.55)],
        "p3": [("j", 0.95), ("k", 0.20), ("l", 0.10)],
        "p4": [("m", 0.50), ("n", 0.45), ("o", 0.40)],
    }
    gold = {"p0": {"a"}, "p1": {"d", "e"}, "p2": {"h"}, "p3": {"j"}, "p4": set()}
    k, threshold, dev = choose_on_dev(ranked, gold)
    assert (k, dev["flags"]) == (2, 4)
    # a midpoint of two scores and an F1 of counts: a few roundings, so within 1e-12 of the printed values
    assert (threshold, dev["F1"]) == pytest.approx((0.7749999999999999, 88.88888888888889), rel=1e-12, abs=1e-12)


def test_the_stored_vectors_carry_the_title_vectors_of_a_bundle_with_a_title_term(monkeypatch) -> None:
    """Without them the index has no title vectors, every title cosine is 0, and the run measures another model."""
    from types import SimpleNamespace

    import numpy as np

    from experiments import alerts_eval
    from semdup.core.posts import Post

    class FakeBundle:
        def __init__(self, *args) -> None:
            pass

        def document_fields(self, posts):
            return [{"terms": {}, "model": "h-1"} for _ in posts]

    monkeypatch.setattr(alerts_eval, "Bundle", FakeBundle)
    bundle = SimpleNamespace(version="h-1", uses_title=True, path=None, manifest={}, pipeline=None, term_weights=None)
    with pytest.raises(ValueError, match="has a title term"):
        alerts_eval.StoredVectors(bundle, {})
    enc = alerts_eval.StoredVectors(
        bundle, {"1": np.ones(2), "2": np.zeros(2)}, {"1": np.array([0.6, 0.8]), "2": None}
    )
    fields = enc.document_fields([Post("1", "t", "b"), Post("2", "", "b")])
    assert [f["title_vector"] for f in fields] == [[0.6, 0.8], None] and fields[0]["vector"] == [1.0, 1.0]
