"""Post → the lexical part of an index document.

The indexed text is exactly what the encoders read (HTML stripped, code blocks dropped, URLs as one token),
so lexical candidates and neural scores see the same words. semdup's own fields are added by
:func:`semdup.index_format.mapping.semdup_source` (their packed copy: :mod:`semdup.index_format.packed_fields`).
"""

from __future__ import annotations

import hashlib
import html
from typing import Any

from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipelineSettings, check_post, clean_text

__all__ = ["lexical_document", "index_action", "content_hash", "stored_post"]


def lexical_document(post: Post, settings: TextPipelineSettings | None = None) -> dict[str, Any]:
    """Fields for a semdup index. Raises PostError for a post with neither title nor body, or binary text."""
    check_post(post)
    s = settings or TextPipelineSettings()
    return {"post_id": post.id, "title": clean_text(post.title, s), "body": clean_text(post.body, s)}


def stored_post(post_id: str, title: str, body: str) -> Post:
    """A post read back from an index semdup created, to be encoded again (a backfill to a new model, a flag).

    The index holds each field as :func:`lexical_document` cleaned it, and cleaning is not idempotent: ``&lt;b&gt;``
    became ``<b>``, which a second pass strips as a tag (5 of the 9,838 Travel title and body fields changed so).
    Escaped here, the stored text comes back from the encoders' cleaning unchanged, so what is encoded again is
    exactly what the index holds (``clean_text(html.escape(x)) == x`` for every cleaned ``x`` under
    ``MAX_FIELD_CHARS``; tested on every Travel field).
    """
    return Post(post_id, html.escape(title, quote=False), html.escape(body, quote=False))


def index_action(index: str, post: Post, settings: TextPipelineSettings | None = None) -> dict[str, Any]:
    """A bulk ``index`` action with the post id as ``_id``: writing it twice writes the same document."""
    return {"_op_type": "index", "_index": index, "_id": post.id, "_source": lexical_document(post, settings)}


def content_hash(title: str, body: str) -> str:
    """A short hash of a post's raw text as its source stores it: stored as ``semdup.content_hash`` beside the
    vectors, so a backfill or ``semdup watch`` finds posts edited since (whatever wrote the edit) by comparing it
    with the hash of the source's current text, without encoding anything."""
    raw = f"{title}\x00{body}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).hexdigest()[:32]
