"""``semdup.packed``: a post's dense vector and learned term weights as one binary doc value.

The reranker gets them from the candidate search itself (``docvalue_fields``) instead of a second request that
loads and parses 100 stored ``_source`` documents (``benchmarks/rerank_latency.py``). The bytes, little-endian::

    uint8   format version (1, 2 or 3)
    uint32  D, the vector's dimension (0: no dense encoder)
    uint32  N, the number of term weights
    float32 vector[D]                       exact: the encoder's float32 output
    float32 weights[N]                      the float32 of each learned weight (what OpenSearch keeps too)
    version 1: utf-8 feature names, joined by "\\n"   (tokens hold no whitespace; a name with "\\n" is refused)
    version 2: uint32 ids[N], the terms' ids in the vocabulary of the bundle that wrote the value
    version 3: version 2, then uint32 T (0 or D) and float32 title[T], the title's own vector (a bundle whose
               fusion has a title term; T = 0 for a post without a title)

written as standard base64 (what a ``binary`` field takes). OpenSearch returns doc values as base64 without
padding; :func:`unpack_semdup_fields` accepts both.

Why version 2: the reranker scores cos_bow for 100 candidates per query. With names it must hash every stored
name (≈ 6,000 per call) to look it up in the query's weights; with ids it gathers from a dense array in numpy,
and nothing is decoded as text. The ids mean something only with the bundle that wrote them, which the index's
model guard already ensures (a candidate's ``semdup.model`` must equal the reranker's bundle version). The
workers write version 2; version 1 values (written by semdup before it, or without a vocabulary) stay readable.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

try:  # SIMD base64: decoding 100 candidates' values is ~6x faster than binascii
    from pybase64 import b64decode as _b64decode
except ImportError:  # pragma: no cover - pybase64 is a dependency; binascii gives the same bytes
    _b64decode = base64.b64decode

__all__ = ["PackedTerms", "PackedValue", "pack_semdup_fields", "unpack_semdup_fields", "unpack_semdup_value",
           "PACKED_VERSION"]

PACKED_VERSION = 2  # what pack_semdup_fields writes when given term ids
TITLE_VERSION = 3  # ... and a title vector
_NAMES_VERSION = 1
_HEADER = struct.Struct("<BII")
_COUNT = struct.Struct("<I")


class PackedTerms(Mapping[str, float]):
    """Term weights side by side with their names or vocabulary ids, a read-only mapping ``name -> weight``.

    It reads as (and compares equal to) the ``dict`` it stands for, so code that treats terms as a dict keeps
    working; the reranker's fusion reads ``ids`` / ``names`` and ``weights`` directly and scores 100 candidates
    in numpy (:func:`semdup.reranker.fusion.compute_components`).

    Args:
        weights: the weights [N].
        names: the feature names, or None when only ids are known.
        ids: vocabulary ids [N], or None.
        feature_names: the bundle's feature name of every id (resolves ``names`` from ``ids`` when asked).
    """

    __slots__ = ("weights", "ids", "_names", "_feature_names", "_dict")

    def __init__(
        self,
        weights: np.ndarray,
        names: list[str] | None = None,
        ids: np.ndarray | None = None,
        feature_names: Sequence[str] | None = None,
    ) -> None:
        if names is None and ids is None:
            raise ValueError("PackedTerms needs the feature names or their vocabulary ids")
        for what, seq in (("feature names", names), ("ids", ids)):
            if seq is not None and len(seq) != len(weights):
                raise ValueError(f"{len(seq)} {what} but {len(weights)} weights")
        self.weights = weights
        self.ids = ids
        self._names = names
        self._feature_names = feature_names
        self._dict: dict[str, float] | None = None

    @property
    def feature_names(self) -> Sequence[str] | None:
        """The bundle's feature names by id, when known (their count bounds the ids)."""
        return self._feature_names

    @property
    def names(self) -> list[str]:
        """The feature names (looked up by id in the bundle's feature names when the value carried ids)."""
        if self._names is None:
            table = self._feature_names
            if table is None:
                raise ValueError(
                    "these term weights were packed with vocabulary ids; reading them by name needs the bundle's "
                    "feature names (unpack_semdup_fields(..., feature_names=bundle.feature_names()))"
                )
            ids = self.ids.tolist()  # type: ignore[union-attr]
            if ids and max(ids) >= len(table):
                raise ValueError(f"a term id ({max(ids)}) is outside the bundle's {len(table)} features")
            self._names = [table[i] for i in ids]
        return self._names

    def _as_dict(self) -> dict[str, float]:
        if self._dict is None:
            self._dict = dict(zip(self.names, self.weights.tolist(), strict=True))
        return self._dict

    def __getitem__(self, name: str) -> float:
        return self._as_dict()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.weights)

    def __repr__(self) -> str:
        return f"PackedTerms({self._as_dict()!r})"


class PackedValue(NamedTuple):
    """A decoded ``semdup.packed`` value; ``title`` is None unless the value is format 3 with a title vector."""

    vector: np.ndarray | None
    terms: PackedTerms
    title: np.ndarray | None = None


def pack_semdup_fields(
    vector: Any,
    terms: Mapping[str, float],
    term_ids: Sequence[int] | None = None,
    title_vector: Any = None,
    with_title: bool = False,
) -> str:
    """The base64 ``semdup.packed`` value of a vector (None = no dense encoder) and term weights.

    With ``term_ids`` (the terms' vocabulary ids, in the order of ``terms``) the value is format 2, else 1.
    ``with_title`` (a bundle with a title term; needs ``term_ids``) makes it format 3, carrying ``title_vector``
    (None: the post has no title).

    Example::

        >>> vector, terms = unpack_semdup_fields(pack_semdup_fields([0.6, 0.8], {"visa": 0.5}))
        >>> vector, dict(terms)
        (array([0.6, 0.8], dtype=float32), {'visa': 0.5})
    """
    vec = np.zeros(0, dtype="<f4") if vector is None else np.asarray(vector, dtype="<f4").ravel()
    weights = np.fromiter(terms.values(), dtype="<f4", count=len(terms))
    if term_ids is not None:
        if len(term_ids) != len(terms):
            raise ValueError(f"{len(term_ids)} term ids for {len(terms)} term weights")
        tail = np.asarray(term_ids, dtype="<u4").tobytes()
        version = PACKED_VERSION
        if with_title or title_vector is not None:
            title = np.zeros(0, dtype="<f4") if title_vector is None else np.asarray(title_vector, dtype="<f4").ravel()
            if title.size not in (0, vec.size):
                raise ValueError(f"a title vector of dimension {title.size} beside a vector of {vec.size}")
            tail += _COUNT.pack(title.size) + title.tobytes()
            version = TITLE_VERSION
    elif with_title or title_vector is not None:
        raise ValueError("a title vector is packed only with term ids (format 3)")
    else:
        if any("\n" in name for name in terms):
            raise ValueError("a feature name holds a newline; feature names are tokens and cannot hold whitespace")
        tail = "\n".join(terms).encode("utf-8")
        version = _NAMES_VERSION
    raw = b"".join((_HEADER.pack(version, vec.size, len(terms)), vec.tobytes(), weights.tobytes(), tail))
    return base64.b64encode(raw).decode("ascii")


def unpack_semdup_fields(
    text: str, feature_names: Sequence[str] | None = None
) -> tuple[np.ndarray | None, PackedTerms]:
    """(float32 vector or None, the term weights as :class:`PackedTerms`) of a ``semdup.packed`` value.

    ``feature_names``: the bundle's feature name of every vocabulary id, to read a format-2 value's terms by
    name (the fusion does not need them: it works on the ids).

    Raises:
        ValueError: not base64, an unknown format version, or a length that does not add up.
    """
    value = unpack_semdup_value(text, feature_names)
    return value.vector, value.terms


def unpack_semdup_value(text: str, feature_names: Sequence[str] | None = None) -> PackedValue:
    """Every part of a ``semdup.packed`` value, the title vector of a format-3 one included.

    Raises:
        ValueError: see :func:`unpack_semdup_fields`.
    """
    try:
        raw = _b64decode(text + "=" * (-len(text) % 4), validate=True)
        version, dim, n = _HEADER.unpack_from(raw)
    except (binascii.Error, ValueError, struct.error) as exc:
        raise ValueError(f"semdup.packed is not a packed semdup value ({exc}); re-index the post") from exc
    if version not in (_NAMES_VERSION, PACKED_VERSION, TITLE_VERSION):
        raise ValueError(
            f"semdup.packed has format version {version}, this semdup reads {_NAMES_VERSION} to {TITLE_VERSION}; "
            "upgrade semdup"
        )
    start = _HEADER.size
    tail_at = start + 4 * (dim + n)
    title_at = tail_at + 4 * n
    title_dim = 0
    bad = len(raw) < tail_at or (version == PACKED_VERSION and len(raw) != title_at)
    if version == TITLE_VERSION and not bad:
        bad = len(raw) < title_at + _COUNT.size
        if not bad:
            (title_dim,) = _COUNT.unpack_from(raw, title_at)
            bad = title_dim not in (0, dim) or len(raw) != title_at + _COUNT.size + 4 * title_dim
    if bad:
        raise ValueError(f"semdup.packed holds {len(raw)} bytes, not what its header announces; re-index the post")
    # read-only views of the decoded bytes: no copy (np.float32 is "<f4" on every platform numpy runs on here)
    vector = np.frombuffer(raw, dtype="<f4", count=dim, offset=start) if dim else None
    weights = np.frombuffer(raw, dtype="<f4", count=n, offset=start + 4 * dim)
    if version in (PACKED_VERSION, TITLE_VERSION):
        ids = np.frombuffer(raw, dtype="<u4", count=n, offset=tail_at)
        title = (
            np.frombuffer(raw, dtype="<f4", count=title_dim, offset=title_at + _COUNT.size) if title_dim else None
        )
        return PackedValue(vector, PackedTerms(weights, ids=ids, feature_names=feature_names), title)
    try:
        names = raw[tail_at:].decode("utf-8").split("\n") if n else []
    except UnicodeDecodeError as exc:
        raise ValueError(f"semdup.packed feature names are not UTF-8 ({exc}); re-index the post") from exc
    if len(names) != n:
        raise ValueError(f"semdup.packed announces {n} term weights but holds {len(names)} names; re-index the post")
    return PackedValue(vector, PackedTerms(weights, names=names))
