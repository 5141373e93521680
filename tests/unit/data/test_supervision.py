"""Supervision sources (dump, SemEval, pairs, groups) count what they leave out; splits never leak a cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from semdup.core.errors import DataError
from semdup.data.supervision import clusters, load_supervision
from semdup.data.supervision_split import held_out_size, split_supervision


def _post(i: int) -> dict[str, str]:
    return {"id": str(i), "title": f"title {i}", "body": f"body {i}"}


def _dump(tmp: Path, n_pairs: int = 30, dated: bool = True) -> Path:
    d = tmp / "dump"
    d.mkdir()
    rows = "".join(f'<row Id="{i}" PostTypeId="1" Title="question {i}" Body="text {i}" />' for i in range(2 * n_pairs))
    (d / "Posts.xml").write_text(f"<posts>{rows}</posts>", encoding="utf-8")
    links = []
    for k in range(n_pairs):  # pair (2k+1 -> 2k) closed on day k: a later pair, a later date
        date = f' CreationDate="2014-01-{k + 1:02d}T10:00:00.000"' if dated else ""
        links.append(f'<row Id="{k}"{date} PostId="{2 * k + 1}" RelatedPostId="{2 * k}" LinkTypeId="3" />')
    links.append('<row Id="900" PostId="1" RelatedPostId="9999" LinkTypeId="3" />')  # a post not in the dump
    links.append('<row Id="901" PostId="3" RelatedPostId="3" LinkTypeId="3" />')  # a self link
    links.append('<row Id="902" PostId="1" RelatedPostId="5" LinkTypeId="1" />')  # related: a hard negative
    (d / "PostLinks.xml").write_text(f"<postlinks>{''.join(links)}</postlinks>", encoding="utf-8")
    return d


def test_a_dump_counts_missing_and_self_links_and_keeps_dates(tmp_path: Path) -> None:
    sup = load_supervision(_dump(tmp_path))
    r = sup.report
    assert sup.kind == "retrieval" and r.format == "stackexchange-dump"
    assert (r.queries, r.duplicate_links, r.non_duplicate_links) == (30, 30, 1)
    assert (r.missing_post_links, r.self_links, r.dated_links) == (1, 1, 30)
    assert "1 missing post" in r.line() and "1 self" in r.line()


def test_a_dated_dump_holds_out_its_latest_clusters(tmp_path: Path) -> None:
    split = split_supervision(load_supervision(_dump(tmp_path)), share=0.2, min_queries=5, max_share=0.3)
    dump, name = split.held_out
    held = {q.post.id for q in dump.queries(name)}
    assert split.report.by == "time" and split.report.held_out_queries == 6 == len(held)
    assert held == {str(2 * k + 1) for k in range(24, 30)}  # the six pairs closed last
    assert split.report.cut == "2014-01-25T10:00:00.000"
    assert len(dump.queries("train")) == 24


def test_without_dates_the_split_is_by_cluster_and_repeats(tmp_path: Path) -> None:
    sup = load_supervision(_dump(tmp_path, dated=False))
    a = split_supervision(sup, min_queries=5)
    b = split_supervision(sup, min_queries=5)
    assert a.report.by == "cluster" and a.report == b.report
    assert a.held_out[0].splits == b.held_out[0].splits


def _pairs_file(tmp: Path, rows: list[tuple[int, int, str]]) -> Path:
    path = tmp / "pairs.jsonl"
    path.write_text("".join(json.dumps({"query": _post(q), "candidate": _post(c), "label": lab}) + "\n"
                            for q, c, lab in rows), encoding="utf-8")
    return path


def test_pairs_labelled_both_ways_are_left_out_and_counted(tmp_path: Path) -> None:
    rows = [(1, 2, "duplicate"), (2, 1, "non-duplicate"), (3, 4, "duplicate"), (3, 4, "duplicate"),
            (5, 5, "duplicate"), (6, 7, "non-duplicate")]
    sup = load_supervision(_pairs_file(tmp_path, rows))
    assert sup.kind == "pairs"
    assert [(p.query.id, p.candidate.id) for p in sup.data] == [("3", "4"), ("6", "7")]
    assert (sup.report.conflicting, sup.report.self_links, sup.report.duplicate_links) == (2, 1, 1)


def test_a_pair_split_keeps_every_connected_post_on_one_side(tmp_path: Path) -> None:
    rows = [(i, 1000 + i, "duplicate") for i in range(60)] + [(i, 2000 + i, "non-duplicate") for i in range(60)]
    split = split_supervision(load_supervision(_pairs_file(tmp_path, rows)), min_queries=10)
    train_ids = {x for p in split.train for x in (p.query.id, p.candidate.id)}
    held_ids = {x for p in split.held_out for x in (p.query.id, p.candidate.id)}
    assert not train_ids & held_ids
    assert split.report.held_out_queries == 12 == held_out_size(60, 0.2, 10, 0.3)  # 20 %, above the minimum


def test_groups_become_a_rerank_set_and_conflicts_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "groups.jsonl"
    lines = [{"query": _post(1), "duplicates": [_post(2), _post(3)], "non_duplicates": [_post(3), _post(4), _post(1)]},
             {"query": _post(10), "duplicates": [_post(11)], "non_duplicates": [_post(12)]}]
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
    split = split_supervision(sup)
    assert split.report.held_out_queries == 71  # 0.3 of the 237 originals with a relevant candidate
    assert not {q.post.id for q in split.train.questions} & {q.post.id for q in split.held_out.questions}


def test_unknown_sources_are_refused_with_the_accepted_ones(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("a,b\n", encoding="utf-8")
    with pytest.raises(DataError, match="accepted"):
        load_supervision(tmp_path / "x.csv")
    with pytest.raises(DataError, match="PostLinks.xml"):
        load_supervision(tmp_path)


def test_clusters_join_chains() -> None:
    got = clusters([("a", "b"), ("c", "b"), ("d", "e")])
    assert got["a"] == got["c"] == frozenset("abc") and got["d"] == frozenset("de")
