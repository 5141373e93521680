"""Post → the lexical part of an index document, and the packed copy of semdup's fields the reranker reads.

The indexed text is exactly what the encoders read (HTML stripped, code blocks dropped, URLs as one token),
so lexical candidates and neural scores see the same words.

``semdup.packed`` holds a post's dense vector and learned term weights as one ``binary`` field with doc values,
so the reranker gets them from the candidate search itself (``docvalue_fields``) instead of a second request
that loads and parses 100 stored ``_source`` documents (benchmarks/rerank_latency.py). The bytes, little-endian::

    uint8   format version (1)
    uint32  D, the vector's dimension (0: no dense encoder)
    uint32  N, the number of term weights
    float32 vector[D]                       exact: the encoder's float32 output
    float32 weights[N]                      the float32 of each learned weight (what OpenSearch keeps too)
    utf-8   feature names, joined by "\\n"   (tokens hold no whitespace; a name with "\\n" is refused)

written as standard base64 (what a ``binary`` field takes). OpenSearch returns doc values as base64 without
padding; :func:`unpack_semdup_fields` accepts both.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from semdup.encoders.text_pipeline import TextPipelineSettings, check_post, clean_text
from semdup.posts import Post

__all__ = ["lexical_document", "index_action", "pack_semdup_fields", "unpack_semdup_fields", "PACKED_VERSION"]

PACKED_VERSION = 1
_HEADER = struct.Struct("<BII")


def lexical_document(post: Post, settings: TextPipelineSettings | None = None) -> dict[str, Any]:
    """Fields for a semdup index. Raises PostError for a post with neither title nor body, or binary text."""
    check_post(post)
    s = settings or TextPipelineSettings()
    return {"post_id": post.id, "title": clean_text(post.title, s), "body": clean_text(post.body, s)}


def index_action(index: str, post: Post, settings: TextPipelineSettings | None = None) -> dict[str, Any]:
    """A bulk ``index`` action with the post id as ``_id``: writing it twice writes the same document."""
    return {"_op_type": "index", "_index": index, "_id": post.id, "_source": lexical_document(post, settings)}


def pack_semdup_fields(vector: Any, terms: Mapping[str, float]) -> str:
    """The base64 ``semdup.packed`` value of a vector (None = no dense encoder) and term weights.

    Example::

        >>> unpack_semdup_fields(pack_semdup_fields([0.6, 0.8], {"visa": 0.5}))
        (array([0.6, 0.8], dtype=float32), {'visa': 0.5})
    """
    vec = np.zeros(0, dtype="<f4") if vector is None else np.asarray(vector, dtype="<f4").ravel()
    names = list(terms)
    if any("\n" in name for name in names):
        raise ValueError("a feature name holds a newline; feature names are tokens and cannot hold whitespace")
    weights = np.asarray([terms[name] for name in names], dtype="<f4")
    raw = b"".join(
        (
            _HEADER.pack(PACKED_VERSION, vec.size, len(names)),
            vec.tobytes(),
            weights.tobytes(),
            "\n".join(names).encode("utf-8"),
        )
    )
    return base64.b64encode(raw).decode("ascii")


def unpack_semdup_fields(text: str) -> tuple[np.ndarray | None, dict[str, float]]:
    """(float32 vector or None, ``{feature name: weight}``) of a ``semdup.packed`` value.

    Raises:
        ValueError: not base64, an unknown format version, or a length that does not add up.
    """
    try:
        raw = base64.b64decode(text + "=" * (-len(text) % 4))
        version, dim, n = _HEADER.unpack_from(raw)
    except (binascii.Error, struct.error) as exc:
        raise ValueError(f"semdup.packed is not a packed semdup value ({exc}); re-index the post") from exc
    if version != PACKED_VERSION:
        raise ValueError(
            f"semdup.packed has format version {version}, this semdup reads {PACKED_VERSION}; upgrade semdup"
        )
    start = _HEADER.size
    names_at = start + 4 * (dim + n)
    if len(raw) < names_at:
        raise ValueError(f"semdup.packed holds {len(raw)} bytes, fewer than its header announces; re-index the post")
    vector = np.frombuffer(raw, dtype="<f4", count=dim, offset=start).astype(np.float32) if dim else None
    weights = np.frombuffer(raw, dtype="<f4", count=n, offset=start + 4 * dim).tolist()
    names = raw[names_at:].decode("utf-8").split("\n") if n else []
    if len(names) != n:
        raise ValueError(f"semdup.packed announces {n} term weights but holds {len(names)} names; re-index the post")
    return vector, dict(zip(names, weights, strict=True))
