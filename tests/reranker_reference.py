"""The reference of a rerank's scores: the same candidates, their fusion components computed here in numpy from
the decoded packed fields (``_source``), not by the cluster's components script.

    reference = local_fusion(reranker)
    assert [c.id for c in reference.rank(post)] == [c.id for c in reranker.rank(post)]

The retrieval is the reranker's own (one ``_msearch/template``); only where the cosines are computed differs, so
equal rankings and scores (to float64 rounding) say the painless script computes what
:func:`semdup.reranker.fusion.compute_components` computes.
"""

from __future__ import annotations

from typing import Any

from semdup.reranker.reranker import Reranker

__all__ = ["local_fusion"]


def local_fusion(rr: Reranker, **changes: Any) -> Reranker:
    """A copy of ``rr`` (``with_settings(**changes)``) that drops the cluster's components of every candidate, so
    ``rank`` reads each candidate's packed fields from ``_source`` and computes the cosines itself."""
    ref = rr.with_settings(**changes)
    retrieve = ref._retrieve

    def without_components(*args: Any) -> Any:
        resolved, cands, *rest = retrieve(*args)
        cands.components.clear()
        return resolved, cands, *rest

    ref._retrieve = without_components  # type: ignore[method-assign]
    return ref
