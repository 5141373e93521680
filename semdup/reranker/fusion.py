"""Fusion of one query with its candidates' stored fields, in the same numpy functions as the offline model.

    s = β_bow · cos_bow + β_dense · cos_dense + α · lexnorm  [+ β_title · cos_title]

(dos Santos et al. 2015, §3.3, eq. 1 for the first two terms; Das et al. 2016, §3.4 for α·lexnorm with the
lexical score min-max normalised over the candidate list). The inputs are what the indexer stored:
``semdup.vector`` (the unit dense vector, float32 values) and ``semdup.terms`` (tf·t / ‖tf·t‖, positive
weights keyed by :func:`semdup.index_format.schema.feature_name`). cos_dense goes through
:func:`semdup.core.scoring.cosine_rows` and the sum through :func:`semdup.core.scoring.fused_scores`,
so the result equals :meth:`semdup.bundle.scorer.BundleScorer.score` on the same candidates.

Candidates without stored fields (not yet indexed by a worker) get their missing components as NaN in
``compute_components``; :func:`compute_fused` scores them with the components they have. The title term
(``cos_title``, the hybrid default's) is 0 for a post or query without a title, as offline
(:class:`semdup.core.scoring.EncodingScorer`), and never makes a candidate incomplete.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from itertools import repeat
from typing import Any

import numpy as np

from semdup.core.errors import SemdupError
from semdup.core.scoring import TITLE_WEIGHT, check_fusion, cosine_rows, fused_scores, minmax_normalise
from semdup.index_format.packed_fields import PackedTerms

__all__ = ["compute_components", "compute_fused", "merge_components", "sparse_dot"]

logger = logging.getLogger(__name__)


def sparse_dot(query: Mapping[str, float], doc: Mapping[str, float]) -> float:
    """Σ_w q_w·d_w over shared keys (cos_bow when both are L2-normalised).

    Example::

        >>> sparse_dot({"a": 0.6, "b": 0.8}, {"b": 1.0})
        0.8
    """
    if len(doc) < len(query):
        query, doc = doc, query
    return float(sum(w * doc[k] for k, w in query.items() if k in doc))


def _cos_bow(query: Mapping[str, float], docs: Sequence[Mapping[str, float]]) -> np.ndarray:
    """``sparse_dot(query, d)`` for every doc at once, as a segmented numpy sum over the docs' stored terms.

    Terms packed with vocabulary ids are matched on the ids, a gather from the query's weights laid out densely
    (when the query carries ids too, as ``Bundle.encode_query`` gives them); terms with names are looked up in
    the query by name (one C-level map). A 100-candidate call spent ~1 ms in per-document dicts and Python sums.
    """
    q_ids = query.ids if isinstance(query, PackedTerms) else None
    by_name: list[str] = []
    name_w: list[np.ndarray] = []
    name_n = np.zeros(len(docs), dtype=np.int64)
    by_id: list[np.ndarray] = []
    id_w: list[np.ndarray] = []
    id_n = np.zeros(len(docs), dtype=np.int64)
    for i, d in enumerate(docs):
        if isinstance(d, PackedTerms) and d.ids is not None and q_ids is not None:
            by_id.append(d.ids)
            id_w.append(d.weights)
            id_n[i] = len(d)
        elif isinstance(d, PackedTerms):
            by_name += d.names
            name_w.append(d.weights)
            name_n[i] = len(d)
        elif d:
            by_name += d.keys()
            name_w.append(np.fromiter(d.values(), dtype=np.float64, count=len(d)))
            name_n[i] = len(d)
    out = np.zeros(len(docs))
    segments = np.arange(len(docs))
    if by_name:
        q = np.fromiter(map(query.get, by_name, repeat(0.0)), dtype=np.float64, count=len(by_name))
        products = q * np.concatenate(name_w).astype(np.float64)
        out += np.bincount(np.repeat(segments, name_n), weights=products, minlength=len(docs))
    if by_id:
        ids = np.concatenate(by_id)
        table = query.feature_names  # type: ignore[union-attr]
        top = max(int(ids.max(initial=0)), int(q_ids.max(initial=0))) + 1
        size = len(table) if table is not None else top
        if top > size:
            raise SemdupError(
                f"a candidate's packed term id ({int(ids.max())}) is outside the bundle's {size} features: the "
                "index holds values of another vocabulary; re-index the posts with this bundle"
            )
        dense = np.zeros(size)
        dense[q_ids] = query.weights  # type: ignore[union-attr]
        products = dense[ids] * np.concatenate(id_w).astype(np.float64)
        out += np.bincount(np.repeat(segments, id_n), weights=products, minlength=len(docs))
    return out


def _stored_cosines(
    query: np.ndarray | None, stored: Sequence[Mapping[str, Any]], key: str, out: np.ndarray
) -> np.ndarray:
    """``out`` with the cosine of ``query`` and each candidate's stored ``key`` vector where it has one (the rest
    keep ``out``'s value: NaN = missing, or 0 for a title)."""
    if query is None:
        return out
    have = [i for i, s in enumerate(stored) if s.get(key) is not None]
    if have:
        docs = np.asarray([stored[i][key] for i in have], dtype=np.float32)  # [M, D], the stored float32s
        q = np.asarray(query, dtype=np.float32)[None, :]  # [1, D]: broadcast, the same sums as [M, D]
        out[have] = cosine_rows(q, docs)
    return out


def compute_components(
    query_vector: np.ndarray | None,
    query_terms: Mapping[str, float] | None,
    stored: Sequence[Mapping[str, Any]],
    lexical: Sequence[float],
    query_title: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Per-candidate components ``cos_bow``, ``cos_dense``, ``lexical``, ``lexnorm`` (arrays [N], NaN = missing),
    and ``cos_title`` (0 where either side has no title vector).

    Args:
        query_vector: the query's unit dense vector [D], or None for a model without a dense encoder.
        query_terms: the query's BOW weights, or None for a model without a BOW path.
        stored: each candidate's ``semdup`` object from the index (``{}`` when not indexed yet).
        lexical: the primary template's raw score of each candidate (0 when it did not match).
        query_title: the query's title vector (a bundle with a title term; None: no title, or no such term).
    """
    n = len(stored)
    cos_dense = _stored_cosines(query_vector, stored, "vector", np.full(n, np.nan))
    cos_bow = np.full(n, np.nan)
    if query_terms is not None:
        have = [i for i, s in enumerate(stored) if s.get("model") is not None and "terms" in s]
        if have:
            cos_bow[have] = _cos_bow(query_terms, [stored[i]["terms"] or {} for i in have])
    cos_title = _stored_cosines(query_title, stored, "title_vector", np.zeros(n))
    lex = np.asarray(lexical, dtype=np.float64)
    return {
        "cos_bow": cos_bow,
        "cos_dense": cos_dense,
        "lexical": lex,
        "lexnorm": minmax_normalise(lex),
        "cos_title": cos_title,
    }


def merge_components(
    query_vector: np.ndarray | None,
    query_terms: Mapping[str, float] | None,
    query_title: np.ndarray | None,
    cluster: Sequence[Sequence[float] | None],
    stored: Mapping[int, Mapping[str, Any]],
    lexical: Sequence[float],
) -> dict[str, np.ndarray]:
    """Per-candidate components as :func:`compute_components` gives them, from the cosines the cluster computed
    (``cluster[i]`` = ``[cos_bow, cos_dense, cos_title, same_model]``, :mod:`semdup.search_templates.components`)
    and, for the candidates whose hits carried none (``cluster[i]`` None), from their stored fields
    (``stored[i]``, read from ``_source``: posts written before the packed format 2). A path the query lacks is
    NaN (the model has none), its title term 0 without a query title; lexnorm is over every candidate.
    """
    n = len(cluster)
    cos_bow, cos_dense, cos_title = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n)
    at = [i for i, c in enumerate(cluster) if c is not None]
    if at:
        rows = np.asarray([cluster[i] for i in at], dtype=np.float64)
        if query_terms is not None:
            cos_bow[at] = rows[:, 0]
        if query_vector is not None:
            cos_dense[at] = rows[:, 1]
        if query_title is not None:
            cos_title[at] = rows[:, 2]
    local = [i for i, c in enumerate(cluster) if c is None]
    if local:
        here = compute_components(query_vector, query_terms, [stored.get(i) or {} for i in local],
                                  [0.0] * len(local), query_title)  # fmt: skip
        cos_bow[local], cos_dense[local], cos_title[local] = here["cos_bow"], here["cos_dense"], here["cos_title"]
    lex = np.asarray(lexical, dtype=np.float64)
    return {"cos_bow": cos_bow, "cos_dense": cos_dense, "lexical": lex, "lexnorm": minmax_normalise(lex),
            "cos_title": cos_title}  # fmt: skip


def compute_fused(components: Mapping[str, np.ndarray], fusion: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """(fused scores [N], complete [N] bool): missing components count 0 and mark the candidate incomplete.

    A component whose weight is 0 never makes a candidate incomplete.
    """
    f = check_fusion(fusion)
    n = len(components["lexical"])
    complete = np.ones(n, dtype=bool)
    parts: dict[str, np.ndarray | None] = {}
    for name, weight in (("cos_bow", f["beta_bow"]), ("cos_dense", f["beta_dense"])):
        x = components[name]
        if weight == 0.0:
            parts[name] = None
            continue
        complete &= ~np.isnan(x)
        parts[name] = np.nan_to_num(x, nan=0.0)
    lexnorm = components["lexnorm"] if f["alpha"] != 0.0 else None
    cos_title = components.get("cos_title") if f.get(TITLE_WEIGHT) else None
    if parts["cos_bow"] is None and parts["cos_dense"] is None and lexnorm is None and cos_title is None:
        return np.zeros(n), complete
    return fused_scores(parts["cos_bow"], parts["cos_dense"], lexnorm, f, cos_title), complete
