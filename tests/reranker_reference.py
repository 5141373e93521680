"""The sequential reference of a rerank, which the package's one overlapped path must equal to the bit.

The steps one after the other, as ``Reranker.rank`` took them before the overlap (issue #19): encode the body,
then the title; search the lexical templates, then the k-NN / learned-sparse sources (no named lexical score);
then ``rank``'s own second request for the first template's score of the candidates it did not find, the fields and
the fusion. Only the retrieval differs, so an equal answer says the overlap, the named-query lexical scores and the
encoder's thread policy change nothing.

    reference = sequential(reranker)
    assert [c.to_json() for c in reference.rank(post)] == [c.to_json() for c in reranker.rank(post)]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from semdup.core.posts import Post
from semdup.core.text_pipeline import check_post
from semdup.reranker.encoding import QueryEncoding
from semdup.reranker.index import ResolvedIndex
from semdup.reranker.reranker import Reranker
from semdup.reranker.sources import Candidates, SourceQuery, merge, search
from semdup.search_templates import query_text

__all__ = ["sequential", "sequential_retrieve"]


def sequential_retrieve(
    rr: Reranker,
    post: Post,
    exclude_id: str | None = None,
    restrict_ids: Sequence[str] | None = None,
    index: str | None = None,
) -> tuple[ResolvedIndex, Candidates, QueryEncoding]:
    """``Reranker.retrieve`` one step after the other (module doc), with the index it resolved."""
    check_post(post)
    s = rr.settings
    resolved = rr.indices.resolve(index or rr.index, s)
    vector, terms = rr.bundle.encode_query(post)
    title = rr.bundle.encode_titles([post])[0] if rr.bundle.uses_title and post.title else None
    ids = None if restrict_ids is None else tuple(map(str, restrict_ids))
    text = query_text(post.title, post.body if s.variant == "text" else "")
    query = SourceQuery(text, s.k_candidates if ids is None else max(len(ids), 1),
                        None if exclude_id is None else str(exclude_id), ids, vector, terms)  # fmt: skip
    sources = rr.sources(resolved)
    found = []
    for stage in ([x for x in sources if not x.needs_encoding], [x for x in sources if x.needs_encoding]):
        found += search(rr.client, resolved.target, stage, query, s.search_timeout)
    cands = merge(found, primary=s.templates[0])
    for rid in ids or ():
        if rid not in cands.sources and rid != query.exclude_id:
            cands.ids.append(rid)
            cands.sources[rid] = ["restrict"]
    return resolved, cands, QueryEncoding(vector, terms, title)


def sequential(rr: Reranker, **changes: Any) -> Reranker:
    """A copy of ``rr`` (``with_settings(**changes)``) whose ``rank`` retrieves one step after the other."""
    ref = rr.with_settings(**changes)
    ref._retrieve = lambda *args: sequential_retrieve(ref, *args)  # type: ignore[method-assign]
    return ref
