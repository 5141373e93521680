"""A flagged pair as the review page shows it: posts as plain text in paragraphs, the shared terms marked.

Posts are user HTML, and none of it reaches the page as markup. A site's own index (one connected by ``semdup
enable``) holds that HTML: :func:`paragraphs` keeps only its text (every character data node, a ``<script>``'s
included, so an attack shows as the text it is), split into paragraphs at block elements, ``<pre>`` blocks kept
apart with their line breaks. An index semdup created holds the text already cleaned
(:func:`semdup.index_format.documents.lexical_document`: tags stripped, entities decoded, code blocks dropped,
URLs as one token), where a ``<`` is a character the author wrote: it is shown as it is, never parsed again. What
the template gets are strings and ``(text, marked)`` segments; Jinja2 escapes every one of them (autoescape on),
and the templates never mark anything safe.

Bidirectional controls (U+202E RIGHT-TO-LEFT OVERRIDE and its kin, :data:`~semdup.core.post_rules.BIDI_CONTROLS`)
are shown as their code, ``[U+202E]`` (:func:`neutral`), in titles, bodies and ids alike: one would otherwise make
a post's id or title show as another (the templates pass every displayed id through the ``neutral`` filter; the
ids in ``data-`` attributes stay as stored, for the verdict API).

The shared terms are found by semdup's one text pipeline (:class:`~semdup.core.text_pipeline.TextPipeline`): the
tokens both posts hold, once cleaned as the models read them, less punctuation, one-letter tokens and common
function words (:data:`STOP_WORDS`, a display choice only: the models see every token).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

from semdup.core.post_rules import BIDI_CONTROLS
from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings

__all__ = [
    "paragraphs",
    "plain_paragraphs",
    "shared_terms",
    "segments",
    "ShownPost",
    "show_post",
    "display_pipeline",
    "STOP_WORDS",
    "neutral",
]

MAX_SHOWN_CHARS = 20_000  # of a body; the rest is cut with a note (the post's link shows it all)
MAX_TERMS_SHOWN = 30  # in the list under a pair (all of them are marked in the text)

_BLOCKS = {
    "address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "figcaption", "figure", "footer",
    "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "ol", "p", "pre", "section", "table", "tbody", "td",
    "th", "thead", "tr", "ul",
}  # fmt: skip

STOP_WORDS = frozenset(
    """a an and are as at be been but by can could did do does for from had has have how i if in into is it its
    me my no not of on or our so than that the their them then there these they this to was we were what when
    where which who why will with would you your am any all also just more most other some such only own same
    too very s t don should now one get got""".split()
)


_BIDI = re.compile(f"[{BIDI_CONTROLS}]")


def neutral(text: object) -> str:
    """``text`` with every bidirectional control shown as its code (``[U+202E]``), so none reorders what follows."""
    return _BIDI.sub(lambda m: f"[U+{ord(m.group()):04X}]", str(text))


class _Text(HTMLParser):
    """Character data by paragraph; tags are only boundaries, attributes are never read."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[tuple[str, str]] = []  # (kind "p" | "pre", text)
        self._buf: list[str] = []
        self._pre = 0

    def _flush(self) -> None:
        text = "".join(self._buf)
        self._buf = []
        if self._pre:
            text = text.strip("\n")
            if text.strip():
                self.out.append(("pre", text))
            return
        text = " ".join(text.split())
        if text:
            self.out.append(("p", text))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _BLOCKS:
            self._flush()
        if tag == "pre":
            self._pre += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in _BLOCKS:
            self._flush()
        if tag == "pre" and self._pre:
            self._pre -= 1

    def handle_data(self, data: str) -> None:
        self._buf.append(data)

    def close(self) -> None:
        super().close()
        self._flush()


def paragraphs(html_text: str, limit: int = MAX_SHOWN_CHARS) -> tuple[list[tuple[str, str]], bool]:
    """``([(kind, text)], cut)``: the text of ``html_text`` by paragraph (kind ``p`` or ``pre``), at most ``limit``
    characters of input read (``cut`` says whether there was more)."""
    cut = len(html_text) > limit
    parser = _Text()
    parser.feed(html_text[:limit])
    parser.close()
    return parser.out, cut


def display_pipeline() -> TextPipeline:
    """The text pipeline's default settings, with no cut at 200 tokens (a long body's terms all count)."""
    return TextPipeline(TextPipelineSettings(max_tokens=1_000_000))


def _terms(pipeline: TextPipeline, post: Post) -> set[str]:
    title, body = pipeline.post_tokens(post)
    return {t for t in (*title, *body) if len(t) > 1 and any(c.isalnum() for c in t) and t not in STOP_WORDS}


def shared_terms(pipeline: TextPipeline, a: Post, b: Post) -> frozenset[str]:
    """The terms both posts hold (as the pipeline tokenises them), less :data:`STOP_WORDS` and punctuation."""
    return frozenset(_terms(pipeline, a) & _terms(pipeline, b) - {pipeline.settings.url_token})


def segments(pipeline: TextPipeline, text: str, terms: frozenset[str]) -> list[tuple[str, bool]]:
    """``text`` cut into ``(piece, marked)`` runs, a token marked when it is one of ``terms``."""
    out: list[tuple[str, bool]] = []
    pos = 0
    for start, end, token in pipeline.spans(text):
        if token in terms:
            if start > pos:
                out.append((text[pos:start], False))
            out.append((text[start:end], True))
            pos = end
    if pos < len(text):
        out.append((text[pos:], False))
    return out


@dataclass(frozen=True)
class ShownPost:
    """One side of a pair, ready for the template (every string is escaped there)."""

    id: str
    title: list[tuple[str, bool]]
    body: list[tuple[str, list[tuple[str, bool]]]]  # (kind, segments) by paragraph
    cut: bool = False
    url: str | None = None
    missing: bool = False
    marked: list[str] = field(default_factory=list)
    more_terms: int = 0


def plain_paragraphs(text: str, limit: int = MAX_SHOWN_CHARS) -> tuple[list[tuple[str, str]], bool]:
    """``([("p", text)], cut)``: text that is not HTML, by its blank-line or line breaks, never parsed."""
    cut = len(text) > limit
    parts = [" ".join(line.split()) for line in text[:limit].splitlines()]
    return [("p", part) for part in parts if part], cut


def show_post(
    pipeline: TextPipeline,
    post: Post | None,
    post_id: str,
    terms: frozenset[str],
    url: str | None,
    html: bool = True,
) -> ShownPost:
    """``post`` as shown beside its pair (``None``: deleted since it was flagged); ``html``: its body is the site's
    HTML (else text semdup cleaned already, shown as it is)."""
    post_id = neutral(post_id)
    if post is None:
        return ShownPost(post_id, [], [], url=url, missing=True)
    if html:
        paras, cut = paragraphs(post.body or "")
    else:  # a link's address is gone from cleaned text: say where one was
        paras, cut = plain_paragraphs(post.body or "")
        token = pipeline.settings.url_token
        paras = [(kind, " ".join("[link]" if w == token else w for w in text.split(" "))) for kind, text in paras]
    return ShownPost(
        id=post_id,
        title=segments(pipeline, neutral(post.title or ""), terms),
        body=[(kind, segments(pipeline, neutral(text), terms)) for kind, text in paras],
        cut=cut,
        url=url,
        marked=sorted(terms)[:MAX_TERMS_SHOWN],
        more_terms=max(0, len(terms) - MAX_TERMS_SHOWN),
    )
