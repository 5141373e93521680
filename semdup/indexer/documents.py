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
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

try:  # SIMD base64: decoding 100 candidates' values is ~6x faster than binascii (benchmarks/rerank_latency.py)
    from pybase64 import b64decode as _b64decode
except ImportError:  # pragma: no cover - pybase64 is a dependency; binascii gives the same bytes
    _b64decode = base64.b64decode

from semdup.encoders.text_pipeline import TextPipelineSettings, check_post, clean_text
from semdup.posts import Post

__all__ = [
    "lexical_document",
    "index_action",
    "pack_semdup_fields",
    "unpack_semdup_fields",
    "PackedTerms",
    "PACKED_VERSION",
]

PACKED_VERSION = 1
_HEADER = struct.Struct("<BII")


class PackedTerms(Mapping[str, float]):
    """Term weights as decoded from ``semdup.packed``: the names and their float32 weights, side by side.

    A read-only mapping (equal to the ``dict`` it stands for), so code that reads terms as a dict keeps working;
    the reranker's fusion reads ``names`` and ``weights`` directly and scores 100 candidates in numpy instead of
    building 100 dicts per query (:func:`semdup.reranker.fusion.compute_components`).
    """

    __slots__ = ("names", "weights", "_dict")

    def __init__(self, names: list[str], weights: np.ndarray) -> None:
        if len(names) != len(weights):
            raise ValueError(f"{len(names)} feature names but {len(weights)} weights")
        self.names = names
        self.weights = weights
        self._dict: dict[str, float] | None = None

    def _as_dict(self) -> dict[str, float]:
        if self._dict is None:
            self._dict = dict(zip(self.names, self.weights.tolist(), strict=True))
        return self._dict

    def __getitem__(self, name: str) -> float:
        return self._as_dict()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __repr__(self) -> str:
        return f"PackedTerms({self._as_dict()!r})"


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

        >>> vector, terms = unpack_semdup_fields(pack_semdup_fields([0.6, 0.8], {"visa": 0.5}))
        >>> vector, dict(terms)
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


def unpack_semdup_fields(text: str) -> tuple[np.ndarray | None, PackedTerms]:
    """(float32 vector or None, the term weights as :class:`PackedTerms`) of a ``semdup.packed`` value.

    Raises:
        ValueError: not base64, an unknown format version, or a length that does not add up.
    """
    try:
        raw = _b64decode(text + "=" * (-len(text) % 4), validate=True)
        version, dim, n = _HEADER.unpack_from(raw)
    except (binascii.Error, ValueError, struct.error) as exc:
        raise ValueError(f"semdup.packed is not a packed semdup value ({exc}); re-index the post") from exc
    if version != PACKED_VERSION:
        raise ValueError(
            f"semdup.packed has format version {version}, this semdup reads {PACKED_VERSION}; upgrade semdup"
        )
    start = _HEADER.size
    names_at = start + 4 * (dim + n)
    if len(raw) < names_at:
        raise ValueError(f"semdup.packed holds {len(raw)} bytes, fewer than its header announces; re-index the post")
    # read-only views of the decoded bytes: no copy (np.float32 is "<f4" on every platform numpy runs on here)
    vector = np.frombuffer(raw, dtype="<f4", count=dim, offset=start) if dim else None
    weights = np.frombuffer(raw, dtype="<f4", count=n, offset=start + 4 * dim)
    try:
        names = raw[names_at:].decode("utf-8").split("\n") if n else []
    except UnicodeDecodeError as exc:
        raise ValueError(f"semdup.packed feature names are not UTF-8 ({exc}); re-index the post") from exc
    if len(names) != n:
        raise ValueError(f"semdup.packed announces {n} term weights but holds {len(names)} names; re-index the post")
    return vector, PackedTerms(names, weights)
