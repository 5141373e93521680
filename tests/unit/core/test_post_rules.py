"""The one rule set for post ids and text (semdup.core.post_rules), on hand-built cases."""

from __future__ import annotations

import re

import pytest

from semdup.core.errors import PostError
from semdup.core.post_rules import (
    ID_PATTERN,
    MAX_ID_BYTES,
    MAX_TEXT_CHARS,
    TEXT_PATTERN,
    check_post_input,
    id_problem,
    opensearch_id_problem,
    post_problem,
    text_problem,
    visible_problem,
)
from semdup.core.posts import Post


@pytest.mark.parametrize(
    ("post_id", "problem"),
    [
        ("7", None),
        ("a" * 512, None),
        ("a" * 513, "id is 513 bytes of UTF-8; at most 512 bytes"),
        ("é" * 256, None),  # 2 bytes each: exactly 512
        ("é" * 255 + "ab", None),  # 510 + 2 bytes
        ("é" * 256 + "a", "id is 513 bytes of UTF-8"),
        ("a" + "é" * 256, "id is 513 bytes of UTF-8"),  # the multi-byte character that crosses the limit
        ("€" * 170 + "ab", None),  # 3 bytes each: 510 + 2
        ("€" * 171, "id is 513 bytes of UTF-8"),
        ("😀" * 128, None),  # 4 bytes each: 512, and 128 characters
        ("😀" * 127 + "abcd", None),
        ("😀" * 127 + "abcde", "id is 513 bytes of UTF-8"),
        ("", "empty id"),
        (" ", "id is only white space"),
        ("\u3000\u00a0 ", "id is only white space"),
        ("\ufeff", "id is only white space"),
        (" a ", None),  # white space around a visible character is the owner's business
        ("a\x01b", "id holds control character U+0001 at character 2"),
        ("a\tb", "id holds control character U+0009 at character 2"),
        ("ab\n", "id holds control character U+000A at character 3"),
        ("a\x7f", "id holds control character U+007F at character 2"),
        ("a\x85", "id holds control character U+0085 at character 2"),
        ("x\ufffd", "id holds U+FFFD (a replacement character: bytes that were not UTF-8) at character 2"),
        ("a\ud800", "id holds a lone surrogate U+D800 (not encodable as UTF-8) at character 2"),
        ("Q1_R3/é€😀", None),
        ("abc\u202egnp.exe", "id holds bidirectional control U+202E (it makes the id show as another) at character 4"),
        ("\u2066x", "id holds bidirectional control U+2066"),
        ("x\u200f", "id holds bidirectional control U+200F"),
        ("שלום", None),  # right-to-left text itself is fine: only the controls that reorder it are refused
    ],
)
def test_id_rules(post_id: str, problem: str | None) -> None:
    got = id_problem(post_id)
    if problem is None:
        assert got is None
        assert re.fullmatch(ID_PATTERN.strip("^$"), post_id)  # the schema's pattern agrees
    else:
        assert got is not None and got.startswith(problem), got
    if got is None:
        assert len(post_id.encode("utf-8")) <= MAX_ID_BYTES


def test_opensearch_alone_refuses_only_empty_and_long_ids() -> None:
    """Deleting goes by OpenSearch's own limits, so an id written before the stricter rules stays deletable."""
    assert opensearch_id_problem("a\x01b") is None and opensearch_id_problem(" ") is None
    assert opensearch_id_problem("") == "empty id"
    assert opensearch_id_problem("é" * 257).startswith("id is 514 bytes of UTF-8")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("Visa for Peru?", None),
        ("line one\nline two\r\n\ttabbed", None),  # tab, newline and return are text
        ("<p>café &amp; 😀</p>", None),
        ("a\x00b", "title holds control character U+0000 at character 2"),
        ("a\x0bb", "title holds control character U+000B at character 2"),
        ("a\x1f", "title holds control character U+001F at character 2"),
        ("a\x7f", "title holds control character U+007F at character 2"),
        ("caf\ufffd", "title holds U+FFFD"),
        ("\udc80", "title holds a lone surrogate U+DC80"),
        ("x" * MAX_TEXT_CHARS, None),
        ("x" * (MAX_TEXT_CHARS + 1), f"title is {MAX_TEXT_CHARS + 1} characters; at most {MAX_TEXT_CHARS}"),
    ],
)
def test_text_rules(text: str, problem: str | None) -> None:
    got = text_problem("title", text)
    assert got is None if problem is None else (got or "").startswith(problem), got
    if "lone surrogate" not in (got or ""):  # the schema cannot state those: JSON parsers refuse them (pydantic too)
        assert (re.fullmatch(TEXT_PATTERN.strip("^$"), text) is not None) == (got is None or "characters;" in got)


def test_text_length_is_left_to_the_caller_when_asked() -> None:
    assert text_problem("body", "x" * 60, max_chars=50) == "body is 60 characters; at most 50"
    assert text_problem("body", "x" * (MAX_TEXT_CHARS + 1), max_chars=None) is None


@pytest.mark.parametrize(
    ("title", "body", "problem"),
    [
        ("Visa?", "", None),
        ("", "<p>How long?</p>", None),
        ("", "", "neither title nor body"),
        (" \n\t", "  ", "neither title nor body"),
        ("<p></p>", "", "no visible text"),
        ("<br/>", "&nbsp; <b> </b>", "no visible text"),
        ("", "<img src='x.png'>", "no visible text"),
        ("\u200b\u200c\u200d\u2060", "", "neither title nor body"),  # zero-width characters only: as the schema says
        ("&#8203;", "\u202e", "no visible text"),
        ("", "<pre><code>print(1)</code></pre>", "no visible text"),  # code blocks are dropped by the index
        ("\u200bVisa?", "", None),
        ("", "<p>See <code>ls -l</code></p>", None),  # inline code is text
    ],
)
def test_visible_text(title: str, body: str, problem: str | None) -> None:
    got = visible_problem(title, body)
    assert got is None if problem is None else (got or "").startswith(problem), got


def test_a_post_is_checked_id_first_and_refused_with_its_id() -> None:
    assert post_problem(Post("1", "Visa?", "")) is None
    assert post_problem(Post("", "a\x01", "")) == "empty id"
    assert post_problem(Post("1", "a\x01", "<p></p>")).startswith("title holds control character U+0001")
    assert post_problem(Post("1", "", "<p></p>")).startswith("no visible text")
    with pytest.raises(PostError, match=r"^post 'q{80}': id is 600 bytes of UTF-8"):
        check_post_input(Post("q" * 600, "A valid post", ""))
    check_post_input(Post("1", "Visa?", ""))  # no error


def test_a_byte_order_mark_is_no_visible_text_anywhere() -> None:
    """U+FEFF is white space to JSON Schema's regular expressions; the rules agree, markup or not."""
    assert visible_problem("\ufeff", "") == "neither title nor body (both empty or white space)"
    assert visible_problem("<p>\ufeff</p>", "").startswith("no visible text")


def test_the_schema_and_the_service_count_the_same_characters_as_invisible() -> None:
    from semdup.core.post_rules import VISIBLE_PATTERN
    from semdup.core.text_pipeline import has_visible_text

    for text in ("\u200b", "\u202e\u2066", "\u00ad\ufeff", "\ufe0f"):
        assert re.search(VISIBLE_PATTERN, text) is None and not has_visible_text(text), repr(text)
    for text in ("\U000a036e", "\ue000", "a\u200b"):  # private use and unassigned characters may show: visible
        assert re.search(VISIBLE_PATTERN, text) is not None and has_visible_text(text), repr(text)
