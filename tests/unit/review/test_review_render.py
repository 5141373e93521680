"""Posts as the review page shows them: text only (no markup passes), paragraphs kept, shared terms marked."""

from __future__ import annotations

from semdup.core.posts import Post
from semdup.review.render import display_pipeline, neutral, paragraphs, segments, shared_terms, show_post

PIPE = display_pipeline()


def test_html_becomes_text_by_paragraph_and_no_tag_or_attribute_survives() -> None:
    body = (
        "<p>First &amp; <b>bold</b> line</p><script>window.__pwned = 1</script>"
        '<img src="x" onerror="window.__pwned = 2"><pre><code>a = 1\n  b = 2</code></pre>'
        "<ul><li>one</li><li>two</li></ul>"
        "<p>Is &lt;script&gt; allowed?</p>"
    )
    paras, cut = paragraphs(body)
    assert not cut
    assert paras == [
        ("p", "First & bold line"),
        ("p", "window.__pwned = 1"),  # a script's text is shown as the text it is
        ("pre", "a = 1\n  b = 2"),
        ("p", "one"),
        ("p", "two"),
        ("p", "Is <script> allowed?"),  # the entity is the characters; the template escapes them again
    ]
    assert all("onerror" not in text for _, text in paras)


def test_a_long_body_is_cut_and_says_so() -> None:
    paras, cut = paragraphs("<p>" + "word " * 10_000 + "</p>", limit=1000)
    assert cut and len(paras[0][1]) < 1000


def test_shared_terms_come_from_the_text_pipeline_without_function_words() -> None:
    a = Post("1", "Visa on arrival in Qatar?", "<p>Can I get a visa at Doha airport?</p>")
    b = Post("2", "Qatar visa for Indians", "How long is a Qatar transit visa valid at the airport?")
    assert shared_terms(PIPE, a, b) == {"visa", "qatar", "airport"}
    assert segments(PIPE, "Visa on arrival in QATAR", frozenset({"visa", "qatar"})) == [
        ("Visa", True),
        (" on arrival in ", False),
        ("QATAR", True),
    ]


def test_a_post_side_keeps_its_segments_and_a_deleted_post_shows_as_gone() -> None:
    post = Post("7", "Visa <b>question</b>", "<p>a visa</p>")
    shown = show_post(PIPE, post, "7", frozenset({"visa"}), "https://travel.stackexchange.com/questions/7")
    assert shown.title == [("Visa", True), (" <b>question</b>", False)]  # a title is text: its markup stays text
    assert shown.body == [("p", [("a ", False), ("visa", True)])]
    gone = show_post(PIPE, None, "8", frozenset(), None)
    assert gone.missing and gone.body == []


def test_text_semdup_cleaned_already_is_shown_as_it_is_never_parsed_again() -> None:
    """A semdup index stores cleaned text: a '<' there is a character the author wrote (an entity once)."""
    stored = 'Is <script>window.__pwned = 3</script> or <img src=x onerror="window.__pwned = 4"> dangerous?'
    shown = show_post(PIPE, Post("9", "t", stored), "9", frozenset(), None, html=False)
    assert shown.body == [("p", [(stored, False)])]
    assert show_post(PIPE, Post("9", "t", stored), "9", frozenset(), None, html=True).body != shown.body


def test_bidi_controls_are_shown_as_their_code_in_ids_titles_and_bodies() -> None:
    pipeline = display_pipeline()
    post = Post("1", "Visa \u202efdp.exe", "<p>a\u2066b\u2069c</p>")
    shown = show_post(pipeline, post, "88\u202e77", frozenset(), None)
    assert shown.id == "88[U+202E]77"
    assert "".join(t for t, _ in shown.title) == "Visa [U+202E]fdp.exe"
    assert "".join(t for _, segs in shown.body for t, _ in segs) == "a[U+2066]b[U+2069]c"
    assert neutral("plain שלום") == "plain שלום"
