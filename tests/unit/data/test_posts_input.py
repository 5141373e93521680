"""read_posts: one call for every input semdup indexes, the format told from the input, bad input in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from semdup.core.errors import DataError
from semdup.core.posts import Post
from semdup.data import read_posts, sniff_format

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
    broken = tmp_path / "broken.jsonl"  # the name decides, so the JSONL loader can name the line at fault
    broken.write_text("id,title\n")
    with pytest.raises(DataError, match=r"broken.jsonl: line 1, column 1: not valid JSON"):
        read_posts(broken)


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
        ("posts.jsonl", b'{"id": "1", "title": "a"}\n{"title": "b"}\n', "line 2: a post without 'id'"),
        ("latin1.jsonl", b'{"id": "1", "title": "caf\xe9"}\n', "not valid UTF-8 at byte offset"),
        ("cut.xml", _SEMEVAL[:300].encode(), "malformed or truncated XML at line"),
    ],
)
def test_bad_input_is_one_data_error_line(tmp_path: Path, name: str, content: bytes, message: str) -> None:
    f = tmp_path / name
    f.write_bytes(content)
    with pytest.raises(DataError, match=message) as caught:
        read_posts(f)
    assert "\n" not in str(caught.value)


def test_missing_path_and_dump_without_links(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="file not found"):
        read_posts(tmp_path / "nowhere.jsonl")
    dump = _dump(tmp_path / "d")
    (dump / "PostLinks.xml").unlink()
    with pytest.raises(DataError, match="PostLinks.xml: file not found"):
        read_posts(dump)
