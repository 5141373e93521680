"""The bundled sets as ``semdup learn`` takes them: every labelled query outside their test sides."""

from __future__ import annotations

import pytest

from semdup.data import load_pairs_jsonl, load_semeval_xml, load_stackexchange_dump
from semdup.data.learn_sets import named_supervision
from semdup.data.paths import askubuntu_files, semeval_files, travel_dir


def test_semeval_learns_from_train_and_dev_never_test() -> None:
    named = named_supervision("semeval")
    sup = named.supervision
    assert sup.kind == "rerank" and sup.report.queries == 280 and not named.exclude
    test_ids = {q.post.id for q in load_semeval_xml(*semeval_files("test")).questions}
    dev_ids = {q.post.id for q in load_semeval_xml(*semeval_files("dev")).questions}
    seen = {q.post.id for q in sup.data.questions}
    assert dev_ids <= seen and not test_ids & seen


def test_travel_excludes_its_test_split() -> None:
    named = named_supervision("travel")
    dump = load_stackexchange_dump(travel_dir())
    assert named.supervision.kind == "retrieval"
    assert named.exclude == {pid for pid, s in dump.splits.items() if s == "test"}


def test_askubuntu_learns_from_its_train_pairs_and_unknown_names_are_refused() -> None:
    named = named_supervision("askubuntu")
    assert named.supervision.kind == "pairs" and len(named.supervision.data) == 715
    test_ids = {p.query.id for p in load_pairs_jsonl(askubuntu_files()[1])}
    assert not test_ids & {p.query.id for p in named.supervision.data}
    with pytest.raises(ValueError, match="accepted: semeval, travel, askubuntu"):
        named_supervision("quora")
