"""A candidate's semdup fields as the fusion reads them: ``{"model", "vector", "terms"}`` (+ ``"title_vector"``).

A rerank's candidates carry their fusion components from the cluster (:mod:`semdup.search_templates.components`).
The fields themselves are read here only where that cannot be: from a hit's ``semdup.packed`` doc value
(:data:`DOCVALUE_FIELDS`, :func:`hit_fields`: the tests' reference, which decodes what the script reads), and, for
posts written before the packed format 2 or not reached by the workers yet, from their ``_source`` in one ``mget``
(:class:`StoredFields`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from semdup.core.errors import SearchIndexError, SemdupError
from semdup.index_format.packed_fields import unpack_semdup_value
from semdup.index_format.schema import PACKED_FIELD

__all__ = ["DOCVALUE_FIELDS", "StoredFields", "hit_fields", "stored_semdup_fields"]

logger = logging.getLogger(__name__)

MODEL_FIELD = "semdup.model"
# what every candidate source asks each hit to carry: the packed vector + term weights, and the model version
DOCVALUE_FIELDS = (PACKED_FIELD, MODEL_FIELD)


def _unpacked(packed: str, model: Any, where: str, feature_names: Sequence[str] | None = None) -> dict[str, Any]:
    """The fields of a ``semdup.packed`` value (+ ``"title_vector"`` from a format-3 one); a bad one raises
    SemdupError."""
    try:
        value = unpack_semdup_value(packed, feature_names)
    except ValueError as exc:
        raise SemdupError(f"{where}{exc}") from exc
    out = {"model": model, "vector": value.vector, "terms": value.terms}
    if value.title is not None:
        out["title_vector"] = value.title
    return out


def hit_fields(hit: Mapping[str, Any]) -> dict[str, Any] | None:
    """A hit's fields from its doc values; None when it carries no packed value."""
    got = hit.get("fields") or {}
    packed, model = got.get(PACKED_FIELD), got.get(MODEL_FIELD)
    if not packed or not model:
        return None
    return _unpacked(packed[0], model[0], f"candidate {hit.get('_id')}: ")


def stored_semdup_fields(semdup: Mapping[str, Any], feature_names: Sequence[str] | None = None) -> dict[str, Any]:
    """A document's ``_source.semdup`` object as the fusion reads it: the packed copy when the post has one
    (exact float32 vector and weights), else the ``vector`` / ``terms`` stored beside it (older documents).

    ``{}`` (a post the workers have not reached) stays ``{}``. ``feature_names`` (``Bundle.feature_names()``)
    lets the terms of a packed value that holds vocabulary ids be read by name; the fusion does not need it.
    """
    if not semdup:
        return {}
    packed = semdup.get("packed")
    if packed:
        return _unpacked(packed, semdup.get("model"), "", feature_names)
    out = {k: v for k, v in semdup.items() if k in ("model", "vector", "terms")}
    if out.get("vector") is not None:
        # kept as the float32 array the fusion stacks (the stored values are float32s: exact)
        out["vector"] = np.asarray(out["vector"], dtype=np.float32)
    return out


def _doc_error(doc: Mapping[str, Any], index: str) -> None:
    if "error" in doc:
        err = doc["error"]
        if isinstance(err, dict) and err.get("type") == "index_not_found_exception":
            raise SearchIndexError(f"index {index!r} does not exist; index posts into it first")
        raise SemdupError(f"reading candidate {doc.get('_id')} of {index!r} failed: {err}")


def _source_fields(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    if not doc.get("found"):
        return None
    return stored_semdup_fields((doc.get("_source") or {}).get("semdup") or {})


class StoredFields:
    """The ``_source`` read of candidates whose hits carried no cosines: one plain ``mget``.

    Only posts written before the packed format 2 (or posts the workers have not reached) come this way: every
    other candidate's fusion components are computed in the cluster (:mod:`semdup.search_templates.components`).

    Args:
        client: an OpenSearch client (:func:`semdup.opensearch_io.clients.connect`).
    """

    def __init__(self, client: Any) -> None:
        self.client = client

    def fetch(self, index: str, ids: Sequence[str], timeout: float) -> dict[str, dict[str, Any] | None]:
        """``id -> the document's semdup fields`` (:func:`stored_semdup_fields`; ``{}`` when the post has none yet,
        None when the post is gone); ``timeout``: seconds allowed for the call."""
        if not ids:
            return {}
        # The whole _source, unfiltered: OpenSearch copies stored bytes as they are, while source filtering parses
        # and re-serialises every float of every vector (measured: 100 Travel posts, 40 ms vs 108-130 ms).
        resp = self.client.mget(index=index, body={"ids": list(ids)}, params={"request_timeout": timeout})
        out: dict[str, dict[str, Any] | None] = {}
        for doc in resp["docs"]:
            _doc_error(doc, index)
            out[str(doc["_id"])] = _source_fields(doc)
        return out
