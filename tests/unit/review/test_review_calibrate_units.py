"""Calibration from verdicts: majority labels, the refusal below the minimum, the threshold's floor, links files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from semdup.core.errors import DataError
from semdup.measures.fitting import best_threshold
from semdup.review.calibrate import MIN_PAIRS, MIN_PER_CLASS, Samples, fit_calibration, read_links
from semdup.review.verdicts import Verdict, judged_pairs, verdict_id


def v(post: str, verdict: str, who: str, when: str = "2025-01-01T00:00:00+00:00", score: float = 0.5) -> Verdict:
    return Verdict("travel", post, "c", verdict, who, when, "m-1", score, None)


def test_each_pair_is_labelled_by_its_reviewers_majority_and_even_splits_are_left_out() -> None:
    pairs, ties = judged_pairs(
        [
            v("1", "duplicate", "a"),
            v("1", "duplicate", "b"),
            v("1", "not_duplicate", "c"),
            v("2", "duplicate", "a"),
            v("2", "not_duplicate", "b"),
            v("3", "not_duplicate", "a", score=0.4),
            v("3", "not_duplicate", "b", when="2025-02-01T00:00:00+00:00", score=0.45),
        ]
    )
    assert ties == 1
    got = {p.post_id: (p.duplicate, p.votes, p.score) for p in pairs}
    assert got == {"1": (True, 3, 0.5), "3": (False, 2, 0.45)}  # the latest verdict's score


def test_verdict_ids_are_one_per_pair_and_reviewer() -> None:
    assert verdict_id("t", "1", "2", "alice") == verdict_id("t", "1", "2", "alice")
    assert (
        len({verdict_id("t", "1", "2", "alice"), verdict_id("t", "1", "2", "bob"), verdict_id("t", "12", "", "alice")})
        == 3
    )


def test_too_few_verdicts_are_refused_saying_how_many_are_needed_and_why() -> None:
    few = Samples("verdicts on travel", [0.9] * 30, [True] * 27 + [False] * 3)
    with pytest.raises(DataError) as err:
        fit_calibration([few], "test")
    text = str(err.value)
    assert f"at least {MIN_PAIRS}" in text and f"{MIN_PER_CLASS} of each" in text and "Platt" in text
    assert "27 duplicates, 3 not" in text


def test_the_fit_is_best_threshold_and_platt_and_never_goes_below_the_judged_scores() -> None:
    scores = [0.9, 0.85, 0.8, 0.78, 0.76, 0.7, 0.69, 0.68, 0.67, 0.66] * 2
    labels = [True] * 5 + [False] * 5
    labels = labels * 2
    cal, precision, recall = fit_calibration([Samples("v", scores, labels)], "test")
    assert cal.threshold == pytest.approx(best_threshold(scores, labels)[0])
    assert precision == 100.0 and recall == 100.0 and cal.n == 20 and cal.positives == 10
    assert cal.a > 0  # a higher score means more likely a duplicate
    # every judged pair a duplicate but five: best_threshold would flag everything (1.0 below the lowest score)
    scores2 = [0.7 + i / 100 for i in range(20)]
    labels2 = [True] * 15 + [False] * 5  # the five non-duplicates score highest: no threshold separates them
    cal2, _, _ = fit_calibration([Samples("v", scores2, labels2)], "test")
    assert best_threshold(scores2, labels2)[0] < min(scores2)
    assert cal2.threshold == pytest.approx(min(scores2))


def test_links_come_from_postlinks_xml_or_a_jsonl_of_pairs(tmp_path: Path) -> None:
    xml = tmp_path / "PostLinks.xml"
    xml.write_text(
        '<?xml version="1.0" encoding="utf-8"?>\n<postlinks>\n'
        '  <row Id="1" PostId="10" RelatedPostId="3" LinkTypeId="3" />\n'
        '  <row Id="2" PostId="10" RelatedPostId="4" LinkTypeId="1" />\n'
        '  <row Id="3" PostId="11" RelatedPostId="5" LinkTypeId="3" />\n</postlinks>\n',
        encoding="utf-8",
    )
    links = read_links(xml)
    assert links.positives == {"10": {"3"}, "11": {"5"}} and links.texts == {}
    jsonl = tmp_path / "pairs.jsonl"
    rows = [
        {
            "query": {"id": "q", "title": "T", "body": "B"},
            "candidate": {"id": "a", "title": "", "body": "x"},
            "label": "duplicate",
        },
        {
            "query": {"id": "q", "title": "T", "body": "B"},
            "candidate": {"id": "b", "title": "", "body": "y"},
            "label": "non-duplicate",
        },
    ]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    links = read_links(jsonl)
    assert links.positives == {"q": {"a"}} and links.texts["q"].title == "T"
    with pytest.raises(DataError, match="PostLinks.xml or a JSONL"):
        read_links(tmp_path / "links.csv")
