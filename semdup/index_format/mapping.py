"""Reading what an index's mapping says about semdup: which model it holds, which source fields hold the
text, which candidate search structures exist, and the ``semdup`` object a writer puts in a document.

This is the contract the writer (:mod:`semdup.indexer`) and the readers (:mod:`semdup.reranker`,
:mod:`semdup.evaluation`) share, so it sits below both and imports neither.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from semdup.core.errors import OpenSearchMissing, SearchIndexError
from semdup.index_format.packed_fields import pack_semdup_fields
from semdup.index_format.schema import CandidateFields
from semdup.opensearch_io.boundary import OpenSearch

__all__ = [
    "MODEL_META_KEY",
    "semdup_source",
    "mappings",
    "index_model",
    "semdup_props",
    "candidate_fields",
    "common_fields",
]

MODEL_META_KEY = "semdup_model"


def semdup_source(fields: dict[str, Any], search: CandidateFields | None = None) -> dict[str, Any]:
    """The ``semdup`` object of a document from one ``Bundle.document_fields`` entry, for an index holding the
    search structures ``search`` (default: none, only the packed fields).

    ``packed`` holds the float32 vector and term weights for the reranker (:mod:`semdup.index_format.packed_fields`;
    with the terms' vocabulary ids when the bundle gives them, ``term_ids``, and the title's own vector when the
    bundle's fusion has a title term, ``title_vector``).
    With ``search.sparse`` the weights also go to ``terms`` (rank_features), with ``search.knn`` the vector to
    ``vector`` (the k-NN field parses it from ``_source``). Both become float32 (exact for the encoder's float32
    output; OpenSearch parses a rank feature as a float and keeps fewer bits still), so ``bulk_write`` writes each
    value as its shortest float32 decimal rather than 17 float64 digits.
    """
    search = search or CandidateFields()
    terms = fields["terms"]
    out: dict[str, Any] = {"model": fields["model"]}
    if search.sparse:
        weights = np.fromiter(terms.values(), dtype=np.float32, count=len(terms))
        out["terms"] = dict(zip(terms.keys(), weights, strict=True))
    vector = None if fields.get("vector") is None else np.asarray(fields["vector"], dtype=np.float32)
    if search.knn and vector is not None:
        out["vector"] = vector
    out["packed"] = pack_semdup_fields(
        vector, terms, fields.get("term_ids"), fields.get("title_vector"), with_title="title_vector" in fields
    )
    return out


def mappings(client: OpenSearch, index: str) -> dict[str, dict[str, Any]]:
    """``concrete index -> its mapping`` for an index or alias."""
    try:
        mappings = client.indices.get_mapping(index=index)
    except OpenSearchMissing as exc:
        raise SearchIndexError(
            f"index {index!r} does not exist; create it with `semdup index-posts --index {index} ...` "
            f"or add semdup to an existing one with `semdup enable --index {index}`"
        ) from exc
    return {name: m.get("mappings") or {} for name, m in mappings.items()}


def index_model(client: OpenSearch, index: str) -> dict[str, str | None]:
    """``concrete index -> _meta.semdup_model`` (None when unclaimed) for an index or alias."""
    return {name: (m.get("_meta") or {}).get(MODEL_META_KEY) for name, m in mappings(client, index).items()}


def semdup_props(mapping: dict[str, Any]) -> dict[str, Any] | None:
    return ((mapping.get("properties") or {}).get("semdup") or {}).get("properties")


def candidate_fields(client: OpenSearch, index: str) -> CandidateFields:
    """The search structures every concrete index behind ``index`` holds (what a write may fill there)."""
    return common_fields(mappings(client, index))


def common_fields(mappings: dict[str, dict[str, Any]]) -> CandidateFields:
    return CandidateFields.common(CandidateFields.of_mapping(semdup_props(m)) for m in mappings.values())
