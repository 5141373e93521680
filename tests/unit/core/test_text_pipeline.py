"""The shared text pipeline: the papers' preprocessing, deterministic vocabulary, refusals of bad posts."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from semdup.core.errors import DataError, PostError
from semdup.core.posts import Post
from semdup.core.text_pipeline import (
    UNK_ID,
    TextPipeline,
    TextPipelineSettings,
    Vocabulary,
    check_post,
    clean_text,
)


def test_html_code_and_urls_are_handled_as_the_papers_do() -> None:
    p = TextPipeline(TextPipelineSettings())
    text = "How do I <b>mount</b> it?<pre><code>sudo rm -rf /</code></pre> See https://askubuntu.com/q/1 &amp; more"
    assert p.tokens(text) == ["how", "do", "i", "mount", "it", "?", "see", "urltoken", "&", "more"]
    assert "sudo" not in clean_text(text, p.settings)


def test_words_with_inner_punctuation_stay_whole() -> None:
    assert TextPipeline(TextPipelineSettings()).tokens("Don't upgrade 12.04 wi-fi") == [
        "don't",
        "upgrade",
        "12.04",
        "wi-fi",
    ]


def test_max_tokens_cuts_title_plus_body() -> None:
    p = TextPipeline(TextPipelineSettings(max_tokens=3))
    assert p.text_tokens(Post("1", "a b", "c d e")) == ["a", "b", "c"]


def test_vocabulary_is_deterministic_and_idf_follows_the_paper(tmp_path: Path) -> None:
    docs = [["b", "a"], ["a"], ["c", "a"]]
    v = Vocabulary.build(docs)
    assert v.itos == ["<pad>", "<unk>", "a", "b", "c"]
    assert v.idf()[2] == pytest.approx(0.0) and v.idf()[3] == pytest.approx(math.log(3))
    v.save(tmp_path / "v.json")
    assert Vocabulary.load(tmp_path / "v.json").itos == v.itos
    assert v.ids(["a", "zzz"]) == [2, UNK_ID]


def test_term_frequencies_leave_out_unknown_words() -> None:
    v = Vocabulary.build([["usb", "mount"]])
    p = TextPipeline(TextPipelineSettings(), v)
    assert p.term_frequencies(["usb", "usb", "zzz"]) == {v.stoi["usb"]: 2}


def test_bad_posts_and_files_are_refused_with_a_reason(tmp_path: Path) -> None:
    with pytest.raises(PostError, match="neither title nor body"):
        check_post(Post("e", " ", ""))
    with pytest.raises(PostError, match="binary"):
        check_post(Post("b", "", "\x00\x01\x02" * 50))
    bad = tmp_path / "v.json"
    bad.write_bytes(b"\xff\xfe not json")
    with pytest.raises(DataError, match="cannot read vocabulary"):
        Vocabulary.load(bad)
    with pytest.raises(DataError, match="trigram"):
        TextPipeline(TextPipelineSettings()).trigram_ids(["a"])


def test_huge_field_is_cut_not_stalled() -> None:
    p = TextPipeline(TextPipelineSettings(max_tokens=5))
    assert len(p.tokens("word " * 500_000)) == 5


def test_tokens_are_identical_to_nltk_regexp_tokenizer_on_real_posts() -> None:
    """The hot path skips nltk.redos' timeout wrapper; the tokens must not change because of it."""
    from nltk.tokenize import RegexpTokenizer

    from semdup.core.text_pipeline import TOKEN_PATTERN, TextPipeline, TextPipelineSettings, clean_text
    from semdup.data import load_stackexchange_dump
    from semdup.data.paths import travel_dir

    settings = TextPipelineSettings(max_tokens=10_000)
    pipeline = TextPipeline(settings)
    nltk_tokenizer = RegexpTokenizer(TOKEN_PATTERN)
    posts = load_stackexchange_dump(travel_dir()).corpus()[:1500]
    for post in posts:
        text = clean_text(post.body, settings).lower()
        assert pipeline.tokens(post.body) == nltk_tokenizer.tokenize(text)[:10_000], post.id


def test_text_tokens_equal_title_tokens_then_body_tokens() -> None:
    """text_tokens tokenises "title body" in one call; it must equal the two fields tokenised apart."""
    from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings
    from semdup.data import load_stackexchange_dump
    from semdup.data.paths import travel_dir

    posts = load_stackexchange_dump(travel_dir()).corpus()[:1500]
    for max_tokens in (3, 50, 200):
        p = TextPipeline(TextPipelineSettings(max_tokens=max_tokens))
        for post in posts:
            assert p.text_tokens(post) == (p.tokens(post.title) + p.tokens(post.body))[:max_tokens], post.id


@pytest.mark.parametrize(
    "title,body", [("   ", "<p> </p>"), ("", "&nbsp;<br/>\n\t"), ("\u00a0", "<div><p></p></div>")]
)
def test_a_post_of_white_space_or_markup_is_refused_like_an_empty_one(title: str, body: str) -> None:
    # Indexed, it would be a zero vector; the workers park it as they park an empty post.
    with pytest.raises(PostError, match="no text|neither title nor body"):
        check_post(Post("w", title, body))
    check_post(Post("ok", "", "<p>mount a usb drive</p>"))  # markup around text is fine
