"""The bundled sets as ``semdup learn`` takes them: their own splits, and their test sides never read."""

from __future__ import annotations

import pytest

from semdup.data import load_semeval_xml, load_stackexchange_dump
from semdup.data.learn_sets import named_supervision
from semdup.data.paths import semeval_files, travel_dir


def test_semeval_learns_from_train_and_is_judged_on_dev() -> None:
    named = named_supervision("semeval")
    split = named.split
    assert split is not None and split.kind == "rerank" and split.held_out.name == "dev"
    assert (split.report.train_queries, split.report.held_out_queries, len(split.held_out.questions)) == (237, 43, 50)
    test_ids = {q.post.id for q in load_semeval_xml(*semeval_files("test")).questions}
    seen = {q.post.id for s in (split.train, split.held_out) for q in s.questions}
    assert not test_ids & seen
    assert {p.id for p in named.corpus} >= {q.post.id for q in split.held_out.questions}  # dev text for the IDF


def test_travel_keeps_its_train_and_dev_splits() -> None:
    named = named_supervision("travel")
    split = named.split
    assert split is not None and split.train[1] == "train" and split.held_out[1] == "dev"
    assert (split.report.train_queries, split.report.held_out_queries) == (741, 108)
    dump = load_stackexchange_dump(travel_dir())
    assert {q.post.id for q in split.train[0].queries("dev")} == {q.post.id for q in dump.queries("dev")}


def test_askubuntu_is_split_automatically_and_unknown_names_are_refused() -> None:
    named = named_supervision("askubuntu")
    assert named.split is None and named.supervision.kind == "pairs"
    with pytest.raises(ValueError, match="accepted: semeval, travel, askubuntu"):
        named_supervision("quora")
