"""query_text keeps a query under OpenSearch's clause limit whatever the script (the analysed-term bound)."""

from __future__ import annotations

import pytest

from semdup.search_templates.registry import _TERM, MAX_ANALYSED_TERMS, MAX_QUERY_TERMS, query_text


def test_ordinary_posts_are_their_first_words() -> None:
    assert query_text("How to mount", "a usb  drive?") == "How to mount a usb drive?"
    long = " ".join(f"w{i}" for i in range(MAX_QUERY_TERMS + 50))
    assert query_text("", long).split() == long.split()[:MAX_QUERY_TERMS]


@pytest.mark.parametrize(
    "body",
    [
        "日本語の長い質問です。東京から京都までの新幹線の切符はどこで買えますか" * 60,  # no white space at all
        ",".join(f"item{i}" for i in range(3000)),  # one "word" of 3,000 terms
        "😀🙂🎉" * 600,  # emoji are terms of their own
        "a.b/c-d " * 400,  # punctuation splits words into terms
    ],
    ids=["cjk", "comma-list", "emoji", "punctuation"],
)
def test_posts_with_many_terms_per_word_are_cut_by_analysed_terms(body: str) -> None:
    text = query_text("title", body)
    assert 0 < len(_TERM.findall(text)) <= MAX_ANALYSED_TERMS
    assert body.startswith(text.split(" ", 1)[1][:50])  # a prefix of the post, not a rewrite


def test_the_term_count_never_undercounts_cjk_next_to_latin() -> None:
    # The standard analyzer splits ideographs from the Latin run before them: "abc漢字" is three terms.
    assert _TERM.findall("abc漢字") == ["abc", "漢", "字"]
