"""read_post_input / read_posts: one call for every input semdup indexes, the format told from the input; a bad
record costs that record only (named by line, row or question, with why), a bad file is one DataError line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from semdup.core.errors import DataError
from semdup.core.posts import Post
from semdup.data import read_posts, sniff_format
from semdup.data.posts_input import Skipped, read_post_input

_SEMEVAL = """<xml version="1.0">
<OrgQuestion ORGQ_ID="Q1">
  <OrgQSubject>Good bank</OrgQSubject><OrgQBody>Which bank in Doha?</OrgQBody>
  <Thread THREAD_SEQUENCE="Q1_R1">
    <RelQuestion RELQ_ID="Q1_R1" RELQ_RANKING_ORDER="1" RELQ_RELEVANCE2ORGQ="PerfectMatch">
      <RelQSubject>Best bank</RelQSubject><RelQBody>Opening an account</RelQBody>
    </RelQuestion>
  </Thread>
</OrgQuestion>
<OrgQuestion ORGQ_ID="Q1">
  <OrgQSubject>Good bank</OrgQSubject><OrgQBody>Which bank in Doha?</OrgQBody>
  <Thread THREAD_SEQUENCE="Q1_R2">
    <RelQuestion RELQ_ID="Q1_R2" RELQ_RANKING_ORDER="2" RELQ_RELEVANCE2ORGQ="Irrelevant">
      <RelQSubject>Car rental</RelQSubject><RelQBody>Cheap cars?</RelQBody>
    </RelQuestion>
  </Thread>
</OrgQuestion>
</xml>
"""


def _dump(root: Path) -> Path:
    root.mkdir()
    (root / "Posts.xml").write_text(
        '<?xml version="1.0" encoding="utf-8"?>\n<posts>\n'
        '<row Id="1" PostTypeId="1" Title="Visa for Peru" Body="&lt;p&gt;How?&lt;/p&gt;" />\n'
        '<row Id="2" PostTypeId="2" Body="an answer" />\n'
        '<row Id="3" PostTypeId="1" Title="Peru visa" />\n</posts>\n',
        encoding="utf-8",
    )
    (root / "PostLinks.xml").write_text(
        '<?xml version="1.0" encoding="utf-8"?>\n<postlinks>\n'
        '<row Id="10" PostId="3" RelatedPostId="1" LinkTypeId="3" />\n</postlinks>\n',
        encoding="utf-8",
    )
    return root


def test_jsonl_semeval_and_dump_give_their_posts(tmp_path: Path) -> None:
    jsonl = tmp_path / "posts.jsonl"
    jsonl.write_text('\ufeff{"id": 7, "title": "Visa?", "body": "How long"}\n\n{"id": "8", "title": "Trains"}\n')
    assert read_posts(jsonl) == [Post("7", "Visa?", "How long"), Post("8", "Trains", "")]

    xml = tmp_path / "dev.xml"
    xml.write_text(_SEMEVAL, encoding="utf-8")
    assert [p.id for p in read_posts(xml)] == ["Q1", "Q1_R1", "Q1_R2"]  # the repeated original once

    dump = _dump(tmp_path / "travel")
    assert {p.id: p.title for p in read_posts(dump)} == {"1": "Visa for Peru", "3": "Peru visa"}


def test_format_comes_from_the_content_then_the_name(tmp_path: Path) -> None:
    no_suffix = tmp_path / "export"
    no_suffix.write_text('  {"id": "1", "title": "a"}\n')
    assert sniff_format(no_suffix) == "jsonl"
    xml_without_suffix = tmp_path / "semeval.dat"
    xml_without_suffix.write_text(_SEMEVAL, encoding="utf-8")
    assert sniff_format(xml_without_suffix) == "semeval" and len(read_posts(xml_without_suffix)) == 3
    assert sniff_format(_dump(tmp_path / "d")) == "stackexchange"
    broken = tmp_path / "broken.jsonl"  # the name decides, so the JSONL reader can name the line at fault
    broken.write_text("id,title\n")
    with pytest.raises(DataError, match=r"broken.jsonl: no post in it \(1 line read, first: line 1: not valid JSON"):
        read_post_input(broken)


def test_named_format_overrides_the_sniffing(tmp_path: Path) -> None:
    f = tmp_path / "posts.txt"
    f.write_text('{"id": "1", "title": "a"}\n')
    assert read_posts(f, fmt="jsonl") == [Post("1", "a", "")]
    with pytest.raises(DataError, match="OrgQuestion"):
        read_posts(f, fmt="semeval")
    with pytest.raises(ValueError, match="accepted: auto, jsonl, semeval, stackexchange"):
        read_posts(f, fmt="csv")


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("posts.csv", b"id,title\n1,a\n", r"posts.csv: cannot tell its format .* expected JSONL posts"),
        ("empty.jsonl", b"", "empty.jsonl: file is empty"),
        ("Posts.xml", b'<?xml version="1.0"?>\n<posts>\n<row Id="1" />\n</posts>\n', "pass the dump folder"),
        ("cut.xml", _SEMEVAL[:300].encode(), "malformed or truncated XML at line"),
        ("pairs.jsonl", b'{"query": {"id": "1"}, "candidate": {"id": "2"}}\n', r"no post in it \(1 line read, first"),
        ("blank.jsonl", b"\n  \n", r"no post in it \(0 lines read\)"),
    ],
)
def test_a_file_that_cannot_be_read_as_a_whole_is_one_data_error_line(
    tmp_path: Path, name: str, content: bytes, message: str
) -> None:
    """Structural problems refuse the whole input, before anything could be sent (also through the lenient reader)."""
    f = tmp_path / name
    f.write_bytes(content)
    for read in (read_posts, read_post_input):
        with pytest.raises(DataError, match=message) as caught:
            read(f)
        assert "\n" not in str(caught.value)


def test_missing_path_and_dump_without_posts(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="file not found"):
        read_post_input(tmp_path / "nowhere.jsonl")
    dump = _dump(tmp_path / "d")
    (dump / "PostLinks.xml").unlink()  # indexing needs the posts only
    assert [p.id for p in read_post_input(dump).posts] == ["1", "3"]
    (dump / "Posts.xml").unlink()
    with pytest.raises(DataError, match="Posts.xml: file not found"):
        read_post_input(dump)


def test_a_jsonl_file_with_an_empty_id_and_a_non_utf8_line_gives_every_other_post(tmp_path: Path) -> None:
    lines = [json.dumps({"id": str(i), "title": f"Visa question {i}", "body": "<p>Why?</p>"}) for i in range(6)]
    lines[2] = json.dumps({"id": "", "title": "No id"})
    raw = [line.encode() for line in lines]
    raw[4] = b'{"id": "4", "title": "caf\xff au lait"}'  # one byte that is not UTF-8, at byte column 26
    f = tmp_path / "posts.jsonl"
    f.write_bytes(b"\n".join(raw) + b"\n")
    read = read_post_input(f)
    assert [p.id for p in read.posts] == ["0", "1", "3", "5"]
    assert read.skipped == [
        Skipped("line 3", "empty id", ""),
        Skipped("line 5", "not UTF-8 (byte 0xff at column 26)"),
    ]
    assert [str(s) for s in read.skipped] == ["line 3: empty id", "line 5: not UTF-8 (byte 0xff at column 26)"]
    assert read.units(len(read.skipped)) == "2 lines"
    with pytest.raises(DataError, match=r"posts.jsonl: line 3: empty id \(2 lines cannot be used in all"):
        read_posts(f)  # the strict fold: the first bad record refuses the file, named by line


def test_every_kind_of_bad_jsonl_line_is_named_and_the_rest_read(tmp_path: Path) -> None:
    lines = [
        b'{"id": "ok", "title": "Visa?"}',
        b'{"id": "ok", "title": "Visa?"}',  # an exact repeat: kept once, not an error
        b'{"id": "ok", "title": "Another text"}',
        b"[1, 2]",
        b'{"id": "x", "title": "cut',
        b'{"title": "no id"}',
        b'{"id": null, "title": "t"}',
        b'{"id": true, "title": "t"}',
        b'{"id": "t", "title": ["a"]}',
        b'{"id": "   ", "title": "t"}',
        b'{"id": "a\\u0001b", "title": "t"}',
        b'{"id": "m", "title": "<p></p>", "body": "&nbsp;"}',
        b'{"id": "c", "body": "\\u0000\\u0000 binary"}',
        b'{"id": 42, "title": "A numeric id", "tags": ["extra fields are ignored"]}',
        b"",
        b'\xef\xbb\xbf{"id": "bom", "title": "files joined with cat keep their byte-order marks"}',
        b'{"id": "deep", "title": "t", "n": ' + b"[" * 1100 + b"]" * 1100 + b"}",  # json's RecursionError (#34)
        b'{"id": "\\u200b\\u200c\\u200d", "title": "an id of zero-width characters shows as no id"}',
    ]
    f = tmp_path / "posts.jsonl"
    f.write_bytes(b"\r\n".join(lines) + b"\r\n")
    read = read_post_input(f)
    assert [p.id for p in read.posts] == ["ok", "42", "bom"] and read.repeats == 1
    assert [str(s) for s in read.skipped] == [
        "line 3: id repeats line 1 with other text (the first is kept)",
        "line 4: a JSON array, not an object",
        "line 5: not valid JSON at column 22 (Unterminated string starting at)",
        "line 6: no 'id' field; every post needs a unique id",
        "line 7: 'id' is null; expected a string (or an integer)",
        "line 8: 'id' is a boolean; expected a string (or an integer)",
        "line 9: 'title' is an array; expected a string",
        "line 10: id is only white space",
        "line 11: id holds control character U+0001 at character 2",
        "line 12: no visible text (only markup, code, white space or invisible characters)",
        "line 13: body holds control character U+0000 at character 1",
        "line 17: JSON that nests arrays or objects too deeply to be read (json gives up at about 1,000 levels)",
        "line 18: id is only invisible characters and white space (U+200B at character 1); it would show as no id",
    ]
    assert [s.post_id for s in read.skipped][:3] == ["ok", None, None]


def test_a_deeply_nested_line_stops_the_strict_reader_with_its_line_named(tmp_path: Path) -> None:
    from semdup.data.reading import iter_jsonl

    f = tmp_path / "pairs.jsonl"
    f.write_text('{"a": 1}\n{"a": ' + "[" * 5000 + "]" * 5000 + "}\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"pairs.jsonl: line 2: JSON that nests arrays or objects too deeply"):
        list(iter_jsonl(f, "pairs"))


def test_a_dump_with_malformed_rows_gives_its_other_questions(tmp_path: Path) -> None:
    dump = tmp_path / "travel"
    dump.mkdir()
    (dump / "Posts.xml").write_text(
        '<?xml version="1.0" encoding="utf-8"?>\n<posts>\n'
        '<row Id="1" PostTypeId="1" Title="Visa for Peru" Body="&lt;p&gt;How?&lt;/p&gt;" />\n'
        '<row PostTypeId="1" Title="A question without Id" />\n'
        '<row Id="3" PostTypeId="2" Body="an answer: not a post to index" />\n'
        '<row Id="4" PostTypeId="1" Title="caf\ufffd" Body="" />\n'
        '<row Id="5" PostTypeId="1" Title="" Body="&lt;p&gt;&lt;/p&gt;" />\n'
        '<row Id="1" PostTypeId="1" Title="Visa for Chile" />\n'
        '<row Id="7" PostTypeId="1" Title="Peru visa" />\n</posts>\n',
        encoding="utf-8",
    )
    read = read_post_input(dump)
    assert read.fmt == "stackexchange" and [p.id for p in read.posts] == ["1", "7"]
    assert [str(s) for s in read.skipped] == [
        "row 2: no Id attribute",
        "row 4 (Id 4): title holds U+FFFD (a replacement character: bytes that were not UTF-8) at character 4",
        "row 5 (Id 5): no visible text (only markup, code, white space or invisible characters)",
        "row 6 (Id 1): id repeats row 1 (Id 1) with other text (the first is kept)",
    ]
    assert read.units(1) == "1 row"


def test_semeval_xml_with_bad_questions_gives_the_others(tmp_path: Path) -> None:
    bad = _SEMEVAL.replace('RELQ_ID="Q1_R2" ', "").replace(
        'RELQ_RELEVANCE2ORGQ="PerfectMatch"',
        'RELQ_RELEVANCE2ORGQ="Unheard-of"',  # labels are not read to index
    )
    bad = bad.replace("</xml>", '<OrgQuestion ORGQ_ID="Q2"><OrgQSubject> </OrgQSubject></OrgQuestion>\n</xml>')
    f = tmp_path / "dev.xml"
    f.write_text(bad, encoding="utf-8")
    read = read_post_input(f)
    assert [p.id for p in read.posts] == ["Q1", "Q1_R1"] and read.repeats == 1  # Q1 comes once per thread
    assert [str(s) for s in read.skipped] == [
        "Thread 1 of OrgQuestion Q1: no RELQ_ID attribute",
        "OrgQuestion Q2: neither title nor body (both empty or white space)",
    ]
    assert read.units(2) == "2 questions"


def test_skipped_records_are_logged_with_ids_never_text(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    f = tmp_path / "posts.jsonl"
    f.write_text(
        '{"id": "1", "title": "PRIVATE-TITLE-1"}\n{"id": "2", "title": "PRIVATE-\\u0001-TITLE"}\n{"id": ""}\n',
        encoding="utf-8",
    )
    with caplog.at_level("INFO", logger="semdup.data.posts_input"):
        read_post_input(f)
    assert "PRIVATE" not in caplog.text
    infos = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
    assert infos == [
        f"{f}: line 2 skipped (post id '2'): title holds control character U+0001 at character 9",
        f"{f}: line 3 skipped (post id ''): empty id",
    ]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning.startswith(f"{f}: 2 lines skipped, 1 posts read (first skipped: line 2: title holds")
