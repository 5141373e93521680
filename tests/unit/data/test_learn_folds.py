"""Folds for out-of-fold learning: whole clusters per fold, by time only where the dates separate the links, every
labelled query judged by exactly one fold, and a planted leak refused."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from label_files import write_dump, write_pairs

from semdup.core.errors import DataError
from semdup.data.learn_folds import check_out_of_fold, fold_supervision, side_post_ids
from semdup.data.learn_sets import named_supervision
from semdup.data.semeval import SemEvalSet
from semdup.data.supervision import load_supervision


def _held(folds) -> list[set[str]]:  # noqa: ANN001
    return [set(f.held_keys) for f in folds.folds]


def test_dated_links_are_cut_by_time_into_contiguous_folds(tmp_path: Path) -> None:
    folds = fold_supervision(load_supervision(write_dump(tmp_path)), 3)
    assert folds.report.by == "time" and folds.report.queries == (10, 10, 10)
    # pair k (query 2k+1) was closed on day k: fold 0 holds the ten earliest, fold 2 the ten latest
    assert _held(folds) == [{str(2 * k + 1) for k in range(10 * i, 10 * i + 10)} for i in range(3)]
    assert folds.report.first_times[1] == "2014-01-11T10:00:00.000"
    assert "3 folds by time (link dates; first 2014-01-01, 2014-01-11, 2014-01-21)" in folds.report.line()
    for f in folds.folds:
        dump, name = f.train
        assert {q.post.id for q in dump.queries(name)} == {q for held in _held(folds) for q in held} - set(f.held_keys)


def test_links_stamped_at_once_are_cut_by_cluster_and_the_report_says_why(tmp_path: Path) -> None:
    folds = fold_supervision(load_supervision(write_dump(tmp_path, one_date=True)), 2)
    assert folds.report.by == "cluster" and folds.report.queries == (15, 15)
    assert "not by time (link dates): 1 distinct value(s) for 30 clusters" in folds.report.why_not
    assert "not by author (OwnerUserId): the questions carry no OwnerUserId" in folds.report.line()
    again = fold_supervision(load_supervision(write_dump(tmp_path / "again", one_date=True)), 2)
    assert _held(again) == _held(folds)  # a fixed hash: the same folds on every run
    assert fold_supervision(load_supervision(write_dump(tmp_path / "other", one_date=True)), 2, salt="x") != folds


def test_questions_dates_cut_by_time_where_the_links_carry_none(tmp_path: Path) -> None:
    folds = fold_supervision(load_supervision(write_dump(tmp_path, dated=False, asked=True)), 2)
    assert folds.report.by == "time" and folds.report.field == "CreationDate" and folds.report.queries == (15, 15)
    assert "not by time (link dates): 30 of 30 duplicate links carry no date" in folds.report.why_not
    assert _held(folds)[0] == {str(2 * k + 1) for k in range(15)}  # the earlier questions


def test_an_author_never_has_questions_in_two_folds(tmp_path: Path) -> None:
    # 10 askers; asker a wrote questions a, a+10, a+20, ...; pair k joins asker 2k % 10 and 2k+1 % 10: 5 groups
    folds = fold_supervision(load_supervision(write_dump(tmp_path, one_date=True, owner=lambda i: i % 10)), 2)
    assert folds.report.by == "author" and folds.report.groups == 5 and sum(folds.report.queries) == 30
    assert "by author (OwnerUserId: 5 groups of clusters, none in two folds)" in folds.report.line()
    owners = [{int(q) % 10 for q in held} | {(int(q) - 1) % 10 for q in held} for held in _held(folds)]
    assert not owners[0] & owners[1]


def test_one_author_holding_most_queries_falls_to_the_next_rule(tmp_path: Path) -> None:
    sup = load_supervision(write_dump(tmp_path, one_date=True, owner=lambda i: 0 if i < 40 else i,
                                      tag=lambda i: f"t{i % 6}"))
    folds = fold_supervision(sup, 2)
    assert folds.report.by == "tag" and folds.report.field == "Tags"
    assert "not by author (OwnerUserId): the largest of its 11 groups holds 20 of 30 queries" in folds.report.why_not


def test_every_labelled_query_is_judged_by_exactly_one_fold_and_no_model_sees_its_posts(tmp_path: Path) -> None:
    rows = [(i, 1000 + i, "duplicate") for i in range(40)] + [(i, 2000 + i, "non-duplicate") for i in range(40)]
    rows += [(3000 + i, 4000 + i, "non-duplicate") for i in range(10)]  # random pairs are judged too
    folds = fold_supervision(load_supervision(write_pairs(tmp_path, rows)), 4)
    assert folds.kind == "pairs" and sum(folds.report.queries) == len(folds.labelled) == 90
    assert folds.report.by == "cluster"
    assert "labelled pairs carry no date, author, tag or source" in folds.report.line()
    keys = [k for f in folds.folds for k in f.held_keys]
    assert sorted(keys, key=int) == [str(i) for i in range(90)]  # each pair once, by its index in labelled
    for f in folds.folds:
        assert not side_post_ids("pairs", f.train) & side_post_ids("pairs", f.held)
        assert [folds.labelled[int(k)] for k in f.held_keys] == list(f.held)


def test_a_query_planted_in_two_folds_is_refused() -> None:
    named = named_supervision("semeval")
    folds = fold_supervision(named.supervision, 2)
    stolen = folds.folds[0].held.questions[0]
    planted = replace(folds.folds[1], held=SemEvalSet("planted", (*folds.folds[1].held.questions, stolen)),
                      held_keys=(*folds.folds[1].held_keys, stolen.post.id))
    bad = replace(folds, folds=(folds.folds[0], planted))
    with pytest.raises(DataError, match="trains on"):  # fold 1's model trains on fold 0's questions
        check_out_of_fold(bad)
    twice = replace(folds, folds=(folds.folds[0], replace(folds.folds[1], held_keys=(*folds.folds[1].held_keys,
                                                                                      stolen.post.id))))
    with pytest.raises(DataError, match="held out by folds 0 and 1"):
        check_out_of_fold(twice)


def test_bundled_sets_never_put_their_test_side_in_a_fold() -> None:
    from semdup.data import load_semeval_xml, load_stackexchange_dump
    from semdup.data.paths import semeval_files, travel_dir

    sem = named_supervision("semeval")
    folds = fold_supervision(sem.supervision, 2)
    assert sum(folds.report.queries) == len(folds.labelled.questions) == 280  # train 1+2 and dev, with a relevant one
    assert folds.report.by == "source"  # the training files and dev: successive annotation rounds
    part1 = {q.post.id for q in sem.supervision.data.questions if int(q.post.id[1:]) <= 200}
    assert set(folds.folds[0].held_keys) == part1 & {q.post.id for q in folds.labelled.questions}
    test_ids = {q.post.id for q in load_semeval_xml(*semeval_files("test")).questions}
    assert not test_ids & {q.post.id for q in folds.labelled.questions}

    travel = named_supervision("travel")
    folds = fold_supervision(travel.supervision, 2, travel.exclude)
    dump = load_stackexchange_dump(travel_dir())
    test_posts = {pid for pid, s in dump.splits.items() if s == "test"}
    assert folds.report.by == "time" and folds.report.excluded_queries == 231
    labelled = set(folds.labelled[0].splits)
    assert labelled and not labelled & test_posts
    assert sum(folds.report.queries) == len(dump.queries("train")) + len(dump.queries("dev"))


def test_too_few_queries_for_the_folds_are_refused(tmp_path: Path) -> None:
    sup = load_supervision(write_pairs(tmp_path, [(1, 2, "duplicate")]))
    with pytest.raises(DataError, match="cannot fill 2 folds"):
        fold_supervision(sup, 2)
    with pytest.raises(ValueError, match="at least 2 folds"):
        fold_supervision(sup, 1)
