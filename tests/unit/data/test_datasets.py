"""The loaders on the real data sets (counts from the data READMEs) and on broken files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from semdup.core.errors import DataError
from semdup.data import (
    load_pairs_jsonl,
    load_relevancy,
    load_semeval_pairs_jsonl,
    load_semeval_xml,
    load_stackexchange_dump,
)
from semdup.data.paths import default_data_dir
from semdup.data.reading import _CheckedReader

DATA = default_data_dir()
SEMEVAL = DATA / "semeval2016-task3"
OFFICIAL = SEMEVAL / "official"
DEV_XML = OFFICIAL / "SemEval2016-Task3-CQA-QL-dev.xml"
DEV_GOLD = OFFICIAL / "SemEval2016-Task3-CQA-QL-dev.xml.subtaskB.relevancy"
TEST_XML = OFFICIAL / "SemEval2016-Task3-CQA-QL-test-input.xml"
TEST_GOLD = OFFICIAL / "SemEval2016-Task3-CQA-QL-test.xml.subtaskB.relevancy"
TRAIN2_XML = OFFICIAL / "SemEval2016-Task3-CQA-QL-train-part2.xml"
TRAIN1_JSONL = SEMEVAL / "train-part1.pairs.jsonl"
ASKUBUNTU = DATA / "askubuntu-pairs"
TRAVEL = DATA / "travel-stackexchange"

needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"real data not found at {DATA} (set SEMDUP_DATA_DIR)")


@pytest.fixture(scope="module")
def travel():
    return load_stackexchange_dump(TRAVEL)


# ---------------------------------------------------------------- real data: counts


@needs_data
@pytest.mark.parametrize(
    ("xml", "gold", "n_questions", "n_pairs"),
    [(DEV_XML, DEV_GOLD, 50, 500), (TEST_XML, TEST_GOLD, 70, 700), (TRAIN2_XML, None, 67, 670)],
)
def test_semeval_xml_counts(xml, gold, n_questions, n_pairs):
    s = load_semeval_xml(xml, gold)
    assert len(s.questions) == n_questions
    assert s.pairs_count() == n_pairs
    assert sum(len(row) for row in s.gold().values()) == n_pairs
    assert len(s.related_posts()) == n_pairs
    assert all(1 <= r.rank <= 100 for q in s.questions for r in q.related)


@needs_data
def test_semeval_xml_keeps_comments_and_labels():
    s = load_semeval_xml(TRAIN2_XML)
    comments = [c for q in s.questions for r in q.related for c in r.comments]
    assert len(comments) == 6700
    assert {c.label for c in comments} == {"Good", "PotentiallyUseful", "Bad"}
    assert {r.label for q in s.questions for r in q.related} == {"PerfectMatch", "Relevant", "Irrelevant"}


@needs_data
def test_dev_xml_labels_and_order_agree_with_gold_file():
    xml_only = load_semeval_xml(DEV_XML).gold()
    gold = load_relevancy(DEV_GOLD)
    assert [(q, list(row)) for q, row in xml_only.items()] == [(q, list(row)) for q, row in gold.items()]
    assert all(xml_only[q][r] == rel for q, row in gold.items() for r, (_, rel) in row.items())


@needs_data
def test_test_input_has_no_labels_until_gold_is_merged():
    bare = load_semeval_xml(TEST_XML)
    assert all(r.relevant is None and r.label is None for q in bare.questions for r in q.related)
    with pytest.raises(DataError, match="relevancy_path"):
        bare.gold()
    merged = load_semeval_xml(TEST_XML, TEST_GOLD).gold()
    assert sum(sum(row.values()) for row in merged.values()) == sum(
        rel for row in load_relevancy(TEST_GOLD).values() for _, rel in row.values()
    )


@needs_data
def test_gold_pair_absent_from_xml_is_refused(tmp_path):
    bad = tmp_path / "dev.relevancy"
    bad.write_text(DEV_GOLD.read_text() + "Q268\tQ999_R1\t1\t0.5\ttrue\n")
    with pytest.raises(DataError, match=r"1 pair\(s\) are not in .*Q999_R1"):
        load_semeval_xml(DEV_XML, bad)


@needs_data
def test_semeval_train_part1_jsonl():
    s = load_semeval_pairs_jsonl(TRAIN1_JSONL)
    assert len(s.questions) == 200
    assert s.pairs_count() == 1999
    first = s.questions[0].related[0]
    assert first.rank == 1 and first.label == "PerfectMatch" and first.relevant is True and first.comments == ()
    flat = load_pairs_jsonl(TRAIN1_JSONL)
    assert sum(p.duplicate for p in flat) == 181 + 606


@needs_data
@pytest.mark.parametrize(("name", "n", "n_dup"), [("train", 715, 353), ("test", 285, 147)])
def test_askubuntu_pairs(name, n, n_dup):
    pairs = load_pairs_jsonl(ASKUBUNTU / f"{name}.pairs.jsonl")
    assert len(pairs) == n
    assert sum(p.duplicate for p in pairs) == n_dup
    assert {p.label for p in pairs} == {"duplicate", "non-duplicate"}


@needs_data
def test_travel_dump_counts(travel):
    assert len(travel.posts) == 4919
    assert travel.skipped_links > 0
    assert travel.skipped_posts == 0
    assert [len(travel.queries(s)) for s in ("train", "dev", "test")] == [741, 108, 231]
    assert travel.posts["1"].body.startswith("<p>")  # raw HTML kept


@needs_data
def test_travel_queries_follow_the_protocol(travel):
    linked = set(travel.duplicate_links)
    for split in ("train", "dev", "test"):
        for q in travel.queries(split):
            assert travel.splits[q.post.id] == split
            assert q.relevant and q.post.id not in q.relevant
            assert all(r in travel.posts for r in q.relevant)
            assert all((q.post.id, r) in linked or (r, q.post.id) in linked for r in q.relevant)
    with pytest.raises(ValueError, match="train, dev, test"):
        travel.queries("validation")


# ---------------------------------------------------------------- broken input


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(DataError, match="nope.xml: file not found"):
        load_semeval_xml(tmp_path / "nope.xml")
    with pytest.raises(DataError, match="not a directory"):
        load_stackexchange_dump(tmp_path / "nodump")


def test_empty_files_are_refused(tmp_path):
    for name, loader in [("a.xml", load_semeval_xml), ("b.jsonl", load_pairs_jsonl), ("c.relevancy", load_relevancy)]:
        (tmp_path / name).write_bytes(b"")
        with pytest.raises(DataError, match="file is empty"):
            loader(tmp_path / name)


@needs_data
def test_truncated_xml_gives_line_and_column(tmp_path):
    cut = tmp_path / "dev.xml"
    cut.write_bytes(DEV_XML.read_bytes()[:200_000])
    with pytest.raises(DataError, match=r"dev.xml: malformed or truncated XML at line \d+, column \d+"):
        load_semeval_xml(cut)


def test_non_utf8_xml_gives_byte_offset(tmp_path):
    head = b'<?xml version="1.0" encoding="utf-8"?>\n<posts>\n  <row Id="1" PostTypeId="1" Title="caf'
    bad = tmp_path / "dump"
    bad.mkdir()
    (bad / "Posts.xml").write_bytes(head + b'\xe9" Body="x" />\n</posts>\n')
    (bad / "PostLinks.xml").write_bytes(b"<postlinks></postlinks>")
    with pytest.raises(DataError, match=rf"Posts.xml: not valid UTF-8 at byte offset {len(head)} \(bytes e9"):
        load_stackexchange_dump(bad)


def test_non_utf8_byte_far_into_a_big_file_is_located(tmp_path):
    # A big file makes expat read many chunks; the bad byte lies far past the first one.
    rows = "".join(f'<row Id="{i}" PostTypeId="1" Title="t{i}" Body="b" />\n' for i in range(40_000))
    head = f"<posts>\n{rows}".encode()
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "Posts.xml").write_bytes(head + b'<row Id="x" Title="\xff" />\n</posts>')
    (dump / "PostLinks.xml").write_bytes(b"<postlinks></postlinks>")
    offset = len(head) + len(b'<row Id="x" Title="')
    with pytest.raises(DataError, match=f"byte offset {offset} "):
        load_stackexchange_dump(dump)


@pytest.mark.parametrize(("data", "offset"), [(b"ab\xc3(xyz", 2), (b"abc\xe9xyz", 3)])
def test_checked_reader_locates_bad_bytes_across_chunk_boundaries(tmp_path, data, offset):
    path = tmp_path / "f.xml"
    path.write_bytes(data)
    with path.open("rb") as fh:
        reader = _CheckedReader(fh, path, None)
        with pytest.raises(DataError, match=f"byte offset {offset} "):
            while reader.read(3):
                pass


def test_checked_reader_passes_a_character_split_across_chunks(tmp_path):
    path = tmp_path / "f.xml"
    path.write_bytes("ab\u00e9\u20acz".encode())
    with path.open("rb") as fh:
        reader = _CheckedReader(fh, path, None)
        chunks = []
        while chunk := reader.read(3):
            chunks.append(chunk)
    assert b"".join(chunks).decode() == "ab\u00e9\u20acz"


def test_non_utf8_jsonl_gives_byte_offset(tmp_path):
    good = json.dumps(
        {
            "query": {"id": "1", "title": "a", "body": ""},
            "candidate": {"id": "2", "title": "b", "body": ""},
            "label": "duplicate",
        }
    )
    path = tmp_path / "p.jsonl"
    path.write_bytes(good.encode() + b"\n" + b'{"query": "\xc3\x28"}\n')
    with pytest.raises(DataError, match=rf"not valid UTF-8 at byte offset {len(good) + 1 + 11} "):
        load_pairs_jsonl(path)


def _pair(label: str = "duplicate", **over) -> dict:
    rec = {
        "query": {"id": "q", "title": "t", "body": "b"},
        "candidate": {"id": "c", "title": "t", "body": "b"},
        "label": label,
    }
    rec.update(over)
    return rec


def test_bad_json_line_names_line_and_column(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(_pair()) + "\n" + '{"query": {"id": 1,\n')
    with pytest.raises(DataError, match=r"p.jsonl: line 2, column \d+: not valid JSON"):
        load_pairs_jsonl(path)


def test_jsonl_missing_field_or_unknown_label(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(_pair(candidate={"id": "c", "title": "t"})) + "\n")
    with pytest.raises(DataError, match="line 1: candidate lacks field\\(s\\) body"):
        load_pairs_jsonl(path)
    path.write_text(json.dumps(_pair(label="dupe")) + "\n")
    with pytest.raises(DataError, match="label 'dupe' is not one of duplicate, non-duplicate"):
        load_pairs_jsonl(path)
    path.write_text(json.dumps(_pair(label="Relevant")) + "\n")
    with pytest.raises(DataError, match="search_rank None is missing"):
        load_semeval_pairs_jsonl(path)


def test_bad_relevancy_lines(tmp_path):
    path = tmp_path / "x.relevancy"
    path.write_text("Q1\tQ1_R1\t1\t0.5\ttrue\nQ1\tQ1_R2\t2\tabc\tfalse\n")
    with pytest.raises(DataError, match="line 2: SCORE 'abc' is not a number"):
        load_relevancy(path)
    path.write_text("Q1\tQ1_R1\t1\t0.5\tmaybe\n")
    with pytest.raises(DataError, match="label 'maybe' is not true or false"):
        load_relevancy(path)
    path.write_text("Q1\tQ1_R1\t1\t0.5\ttrue\nQ1 Q1_R1 1 0.2 true\n")
    with pytest.raises(DataError, match="listed twice"):
        load_relevancy(path)


def _write_dump(root: Path, posts: list[str], links: list[str], splits: str | None = None) -> Path:
    root.mkdir()
    (root / "Posts.xml").write_text(
        '<?xml version="1.0" encoding="utf-8"?>\n<posts>\n' + "\n".join(posts) + "\n</posts>\n"
    )
    (root / "PostLinks.xml").write_text(
        '\ufeff<?xml version="1.0" encoding="utf-8"?>\n<postlinks>\n' + "\n".join(links) + "\n</postlinks>\n"
    )
    if splits is not None:
        (root / "splits.tsv").write_text(splits)
    return root


def test_dump_skips_and_counts_empty_posts_and_dangling_links(tmp_path):
    dump = load_stackexchange_dump(
        _write_dump(
            tmp_path / "d",
            [
                '<row Id="1" PostTypeId="1" Title="Visa for Peru" Body="&lt;p&gt;How?&lt;/p&gt;" />',
                '<row Id="2" PostTypeId="1" Title="" Body="" />',
                '<row Id="3" PostTypeId="1" Title="Peru visa" />',
                '<row Id="4" PostTypeId="2" Body="an answer" />',
            ],
            [
                '<row Id="10" PostId="3" RelatedPostId="1" LinkTypeId="3" />',
                '<row Id="11" PostId="2" RelatedPostId="1" LinkTypeId="3" />',
                '<row Id="12" PostId="1" RelatedPostId="99" LinkTypeId="1" />',
            ],
            "post_id\tsplit\n1\ttest\n3\ttest\n",
        )
    )
    assert set(dump.posts) == {"1", "3"}
    assert dump.posts["1"].body == "<p>How?</p>"
    assert dump.skipped_posts == 1 and dump.other_posts == 1
    assert dump.skipped_links == 2
    assert dump.duplicate_links == (("3", "1"),)
    [query] = dump.queries("test")
    assert query.post.id == "3" and query.relevant == frozenset({"1"})
    assert dump.queries("train") == []


def test_dump_bad_splits_line_and_missing_splits(tmp_path):
    root = _write_dump(
        tmp_path / "d", ['<row Id="1" PostTypeId="1" Title="a" />'], [], "post_id\tsplit\n1\tvalidation\n"
    )
    with pytest.raises(DataError, match="splits.tsv: line 2: found '1\\\\tvalidation'"):
        load_stackexchange_dump(root)
    (root / "splits.tsv").unlink()
    with pytest.raises(DataError, match="without splits.tsv"):
        load_stackexchange_dump(root).queries("test")


def test_xml_row_without_id_is_refused(tmp_path):
    root = _write_dump(tmp_path / "d", ['<row PostTypeId="1" Title="a" />'], [])
    with pytest.raises(DataError, match="Posts.xml: a <row> element lacks the required attribute Id"):
        load_stackexchange_dump(root)
