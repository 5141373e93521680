"""Supervision sources (dump, SemEval, pairs, groups) count what they leave out and keep link dates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from label_files import post_row, write_dump, write_pairs

from semdup.core.errors import DataError
from semdup.data.supervision import clusters, load_supervision


def test_a_dump_counts_missing_and_self_links_and_keeps_dates(tmp_path: Path) -> None:
    sup = load_supervision(write_dump(tmp_path))
    r = sup.report
    assert sup.kind == "retrieval" and r.format == "stackexchange-dump"
    assert (r.queries, r.duplicate_links, r.non_duplicate_links) == (30, 30, 1)
    assert (r.missing_post_links, r.self_links, r.dated_links) == (1, 1, 30)
    assert "1 missing post" in r.line() and "1 self" in r.line()


def test_pairs_labelled_both_ways_are_left_out_and_counted(tmp_path: Path) -> None:
    rows = [(1, 2, "duplicate"), (2, 1, "non-duplicate"), (3, 4, "duplicate"), (3, 4, "duplicate"),
            (5, 5, "duplicate"), (6, 7, "non-duplicate")]
    sup = load_supervision(write_pairs(tmp_path, rows))
    assert sup.kind == "pairs"
    assert [(p.query.id, p.candidate.id) for p in sup.data] == [("3", "4"), ("6", "7")]
    assert (sup.report.conflicting, sup.report.self_links, sup.report.duplicate_links) == (2, 1, 1)


def test_groups_become_a_rerank_set_and_conflicts_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "groups.jsonl"
    lines = [{"query": post_row(1), "duplicates": [post_row(2), post_row(3)],
              "non_duplicates": [post_row(3), post_row(4), post_row(1)]},
             {"query": post_row(10), "duplicates": [post_row(11)], "non_duplicates": [post_row(12)]}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    sup = load_supervision(path)
    assert sup.kind == "rerank" and sup.report.format == "groups-jsonl"
    first = sup.data.questions[0]
    assert [(r.post.id, r.relevant) for r in first.related] == [("2", True), ("4", False)]
    assert (sup.report.conflicting, sup.report.self_links) == (1, 1)


def test_semeval_files_are_read_as_one_rerank_set() -> None:
    from semdup.data.paths import data_dir

    base = data_dir() / "semeval2016-task3"
    if not base.exists():
        pytest.skip("the SemEval data is not beside this checkout")
    sup = load_supervision([base / "train-part1.pairs.jsonl",
                            base / "official" / "SemEval2016-Task3-CQA-QL-train-part2.xml"])
    assert sup.kind == "rerank" and len(sup.data.questions) == 267
    assert (sup.report.duplicate_links, sup.report.non_duplicate_links, sup.report.unlabelled) == (1083, 1586, 0)


def test_unknown_sources_are_refused_with_the_accepted_ones(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("a,b\n", encoding="utf-8")
    with pytest.raises(DataError, match="accepted"):
        load_supervision(tmp_path / "x.csv")
    with pytest.raises(DataError, match="PostLinks.xml"):
        load_supervision(tmp_path)


def test_clusters_join_chains() -> None:
    got = clusters([("a", "b"), ("c", "b"), ("d", "e")])
    assert got["a"] == got["c"] == frozenset("abc") and got["d"] == frozenset("de")
