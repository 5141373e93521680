r"""The one rule set for a post's id and text, shared by every way a post comes in.

``semdup index-posts --input`` (the readers of :mod:`semdup.data.posts_input`), the HTTP API (the request models
of ``POST /v1/posts``, ``/v1/posts/sync``, ``/v1/posts/delete`` and ``/v1/rerank``, whose OpenAPI schema states the
same bounds) and the indexing workers (:func:`semdup.indexer.batch_writer.index_batch`, the last defence for producers
that bypass both) call these functions, so a post one path takes is never one another refuses.

========================  ============================================================================
rule                      why
========================  ============================================================================
id not empty, with a      OpenSearch refuses an empty ``_id`` (and with it a whole bulk request); an id
visible character         of white space or invisible characters (zero-width spaces and joiners ...)
                          shows as no id, or as another with them, and names no post anyone can ask for
id at most                OpenSearch refuses a longer ``_id`` (and with it a whole bulk request).
:data:`MAX_ID_BYTES`      JSON Schema counts characters, so the schema says ``maxLength`` 512 (a
bytes of UTF-8            necessary bound) and ``x-max-utf8-bytes`` 512 (the real one)
id without control        C0 (tab and newline too), DEL and C1 controls break log lines, TSV files and
characters, bidi          terminals; U+FFFD is what undecodable bytes became, so the id is not the one
controls or U+FFFD        its owner knows; bidirectional controls (U+202E ...) make an id show as another
title and body without    :data:`TEXT_FORBIDDEN`: C0 controls but tab, newline and return, DEL, U+FFFD
control characters        (binary content or bytes that were not UTF-8; tab and newline are text)
title and body at most    longer text is cut by the text pipeline anyway (``MAX_FIELD_CHARS``); the
:data:`MAX_TEXT_CHARS`    HTTP service may set a lower bound (``max_text_chars``) and says so in its schema
visible text              a title or a body with something but white space, markup, code blocks and
                          invisible characters (zero-width, bidi controls): otherwise the post is
                          stored empty, and the encoder writes a zero vector that matches nothing
no lone surrogates        they cannot be encoded as UTF-8 (JSON can carry them as ``\ud800`` escapes)
========================  ============================================================================

Each ``*_problem`` function returns the reason as a short phrase (``"empty id"``), or None when the rule holds;
the phrase names positions and sizes, never the post's text, so it may be printed and logged. The regular
expressions the schema states are built from the same character classes (:data:`ID_PATTERN`,
:data:`TEXT_PATTERN`, :data:`VISIBLE_PATTERN`), with ECMA-262's meaning of ``$`` (end of the string).

Example::

    >>> id_problem("")
    'empty id'
    >>> id_problem("é" * 257).split(";")[0]
    'id is 514 bytes of UTF-8'
    >>> id_problem("a\x01b")
    'id holds control character U+0001 at character 2'
    >>> post_problem(Post("7", "Visa?", "")) is None
    True
"""

from __future__ import annotations

import re

from semdup.core.errors import PostError
from semdup.core.posts import Post
from semdup.core.text_pipeline import INVISIBLE_CHARS, has_visible_text

__all__ = [
    "MAX_ID_BYTES",
    "MAX_TEXT_CHARS",
    "ID_FORBIDDEN",
    "BIDI_CONTROLS",
    "TEXT_FORBIDDEN",
    "ID_PATTERN",
    "TEXT_PATTERN",
    "VISIBLE_PATTERN",
    "VISIBLE_TEXT_PATTERN",
    "id_problem",
    "opensearch_id_problem",
    "text_problem",
    "blank_problem",
    "visible_problem",
    "post_problem",
    "check_post_input",
]

MAX_ID_BYTES = 512  # OpenSearch's limit on a document _id, in bytes of UTF-8
MAX_TEXT_CHARS = 100_000  # per field; the text pipeline reads no more (text_pipeline.MAX_FIELD_CHARS)

# Character classes (the inside of [...]), written with escapes so the same string is a Python, Rust and ECMA-262
# regular expression.
BIDI_CONTROLS = r"\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # marks, embeddings, overrides, isolates
ID_FORBIDDEN = rf"\x00-\x1f\x7f-\x9f\ufffd{BIDI_CONTROLS}"
TEXT_FORBIDDEN = r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd"
# Not white space by either ECMA-262's or Python's rules (they differ on U+0085, U+FEFF and U+001C..U+001F; the
# last are forbidden anyway), so the schema and the service count the same characters as visible.
_BLANK = r"\s\x85\ufeff"
# a visible character: not white space, not invisible (zero-width, bidi controls ...: has_visible_text's set)
VISIBLE_PATTERN = rf"[^{_BLANK}{INVISIBLE_CHARS}]"
ID_PATTERN = rf"^[^{ID_FORBIDDEN}]*[^{ID_FORBIDDEN}{_BLANK}{INVISIBLE_CHARS}][^{ID_FORBIDDEN}]*$"
TEXT_PATTERN = rf"^[^{TEXT_FORBIDDEN}]*$"
# a text field that must hold a visible character itself (``/v1/similar``'s title): TEXT_PATTERN and VISIBLE_PATTERN
VISIBLE_TEXT_PATTERN = rf"^[^{TEXT_FORBIDDEN}]*[^{TEXT_FORBIDDEN}{_BLANK}{INVISIBLE_CHARS}][^{TEXT_FORBIDDEN}]*$"

_ID_BAD = re.compile(rf"[{ID_FORBIDDEN}\ud800-\udfff]")
_BIDI = re.compile(rf"[{BIDI_CONTROLS}]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_TEXT_BAD = re.compile(rf"[{TEXT_FORBIDDEN}\ud800-\udfff]")
_VISIBLE = re.compile(VISIBLE_PATTERN)
_ID_UNBLANK = re.compile(rf"[^{_BLANK}]")  # not white space
_INVISIBLE = re.compile(rf"[{INVISIBLE_CHARS}]")
_ID_SHOWN = 80  # characters of an id a message repeats


def _char_problem(what: str, found: re.Match[str]) -> str:
    char, at = found.group(), found.start() + 1
    if char == "\ufffd":
        kind = "U+FFFD (a replacement character: bytes that were not UTF-8)"
    elif "\ud800" <= char <= "\udfff":
        kind = f"a lone surrogate U+{ord(char):04X} (not encodable as UTF-8)"
    elif _BIDI.match(char):
        kind = f"bidirectional control U+{ord(char):04X} (it makes the id show as another)"
    else:
        kind = f"control character U+{ord(char):04X}"
    return f"{what} holds {kind} at character {at}"


def opensearch_id_problem(post_id: str) -> str | None:
    """What OpenSearch itself refuses as a document ``_id``: an empty id or one over :data:`MAX_ID_BYTES` bytes.

    Deleting goes by this rule alone: an id written before the stricter :func:`id_problem` must stay deletable. A
    lone surrogate is refused too: no stored id holds one (ids are UTF-8), and a bulk request carrying one fails whole.
    """
    if not post_id:
        return "empty id"
    found = _SURROGATE.search(post_id)
    if found is not None:
        return _char_problem("id", found)
    size = len(post_id.encode("utf-8", "surrogatepass"))
    if size > MAX_ID_BYTES:
        return (
            f"id is {size} bytes of UTF-8; at most {MAX_ID_BYTES} bytes (OpenSearch's limit on a document _id): "
            "shorten it, e.g. to a hash of it"
        )
    return None


def id_problem(post_id: str) -> str | None:
    """Why ``post_id`` cannot be a post's id, or None (the rules in the module docstring)."""
    if not post_id:
        return "empty id"
    found = _ID_BAD.search(post_id)
    if found is not None:
        return _char_problem("id", found)
    if _ID_UNBLANK.search(post_id) is None:
        return "id is only white space"
    if _VISIBLE.search(post_id) is None:  # ID_PATTERN's visible character: neither white space nor invisible
        found = _INVISIBLE.search(post_id)
        at = f" (U+{ord(found.group()):04X} at character {found.start() + 1})" if found else ""
        return f"id is only invisible characters and white space{at}; it would show as no id"
    return opensearch_id_problem(post_id)


def text_problem(field: str, text: str, max_chars: int | None = MAX_TEXT_CHARS) -> str | None:
    """Why one text field (``title`` or ``body``) cannot be taken, or None: forbidden characters or too long.

    ``max_chars`` None leaves the length to the caller (the HTTP models, whose bound is the server's setting).
    """
    found = _TEXT_BAD.search(text)
    if found is not None:
        return _char_problem(field, found)
    if max_chars is not None and len(text) > max_chars:
        return f"{field} is {len(text)} characters; at most {max_chars}"
    return None


def blank_problem(title: str, body: str) -> str | None:
    """None when the title or the body holds a visible character (:data:`VISIBLE_PATTERN`, what the schema says)."""
    if _VISIBLE.search(title) is None and _VISIBLE.search(body) is None:
        return "neither title nor body (both empty or white space)"
    return None


def visible_problem(title: str, body: str) -> str | None:
    """None when the title or the body holds visible text (markup, code blocks, entities, white space and invisible
    characters do not count: :func:`~semdup.core.text_pipeline.has_visible_text`)."""
    problem = blank_problem(title, body)
    if problem is None and not has_visible_text(title) and not has_visible_text(body):
        problem = "no visible text (only markup, code, white space or invisible characters)"
    return problem


def post_problem(post: Post, max_text_chars: int = MAX_TEXT_CHARS) -> str | None:
    """The first rule ``post`` breaks (id, then title, body, visible text), or None."""
    return (
        id_problem(post.id)
        or text_problem("title", post.title, max_text_chars)
        or text_problem("body", post.body, max_text_chars)
        or visible_problem(post.title, post.body)
    )


def check_post_input(post: Post, max_text_chars: int = MAX_TEXT_CHARS) -> None:
    """Refuse a post the rules refuse.

    Raises:
        PostError: ``post '<id>': <reason>``, the id cut to 80 characters.
    """
    problem = post_problem(post, max_text_chars)
    if problem is not None:
        raise PostError(f"post {post.id[:_ID_SHOWN]!r}: {problem}")
