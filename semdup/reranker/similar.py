"""Similar questions from a title alone: what ``GET /v1/similar`` answers while an asker types.

    search = TitleSearch(reranker)                 # the service's reranker: its bundle, client and index checks
    for post in search.search("Visa on arrival in Qatar?", index="travel", size=5):
        print(post.id, post.score, post.title)

One call costs one title encoding and one ``_msearch``, nothing else (a keystroke must not wait on more):

* the title is encoded once (``Bundle.encode_query`` of a title-only post): its dense vector is the title vector
  the indexer stores for every post (``encode_titles``), and its BOW weights come from the same tokenisation;
* one ``_msearch`` with two search bodies: BM25 on the ``title`` field (the query of the stored template
  ``semdup-bm25-title``, :func:`title_query`) and, where the index maps ``semdup.vector`` as a ``knn_vector``,
  k-NN with the title vector (:class:`semdup.reranker.sources.KnnSource`). Each hit carries the fusion's cosines,
  computed in the cluster from its packed fields (:mod:`semdup.search_templates.components`, the query's title
  vector standing for both its dense vector and its title vector), and its cleaned ``title`` from ``_source``
  (what the asker reads);
* the candidates are fused (:func:`semdup.reranker.fusion.merge_components`):
  s = β_title·cos(title, title) + β_dense·cos(title, post) + β_bow·cos_bow + α·lexnorm, with
  :data:`SIMILAR_FUSION` (chosen on Travel dev, ``python -m benchmarks.similar_eval``).

A candidate without packed fields (not encoded yet) is scored with what it has and ranked after the others; no
second request reads it. Candidates of another model version are refused (:class:`ModelMismatch`), as in a rerank.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from semdup.core.errors import PostError
from semdup.core.posts import Post
from semdup.core.scoring import check_fusion
from semdup.core.text_pipeline import check_post
from semdup.index_format.schema import lexical_field
from semdup.reranker.fusion import compute_fused, merge_components
from semdup.reranker.reranker import Reranker
from semdup.reranker.sources import (
    CandidateSource,
    Components,
    Hit,
    KnnSource,
    SourceQuery,
    merge,
    parse_hits,
    search,
    with_components,
)
from semdup.search_templates import query_text, template_body, template_params
from semdup.search_templates.components import components_params

__all__ = [
    "SIMILAR_FUSION",
    "CANDIDATES",
    "MAX_SIZE",
    "MAX_TITLE_CHARS",
    "SimilarPost",
    "TitleCandidates",
    "TitleSearch",
    "TitleSource",
    "title_query",
]

logger = logging.getLogger(__name__)

# Chosen on Travel dev by MAP over a grid of 383 points (title-only queries, bundle hybrid-minilm-2e00a27a4c08;
# `python -m benchmarks.similar_eval`): dev MAP 53.81, test (once) MAP 39.12 / Acc@5 48.92, where BM25 of
# the title against titles gets 21.15 / 30.74 and against title + body 28.94 / 35.50. The title's cosine with the
# whole post's vector carried the ranking; the title-to-title cosine and BM25's own score added nothing on dev.
SIMILAR_FUSION: dict[str, float] = {"beta_title": 0.0, "beta_dense": 1.0, "beta_bow": 0.25, "alpha": 0.0}
CANDIDATES = 20  # hits per path (BM25, k-NN): few, so a call stays within a keystroke's budget
MAX_SIZE = 50
MAX_TITLE_CHARS = 300  # Stack Exchange titles have at most 150 characters
_TITLE_SOURCE = ["title"]


@dataclass(frozen=True)
class SimilarPost:
    """One similar question: its id, fused score, cleaned title (None when the hit carried none), the paths that
    found it (``bm25``, ``knn``), and whether its semdup fields were indexed (False: scored with BM25 alone)."""

    id: str
    score: float
    title: str | None
    sources: tuple[str, ...] = ()
    complete: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "score": self.score,
            "title": self.title,
            "sources": list(self.sources),
            "complete": self.complete,
        }


@dataclass
class TitleCandidates:
    """The merged candidates of one title, their fields as the fusion reads them, and their titles."""

    ids: list[str]
    components: list[Components | None]
    lexical: list[float]
    sources: dict[str, list[str]]
    titles: dict[str, str] = field(default_factory=dict)


def title_query(
    text: str,
    size: int,
    exclude_id: str | None = None,
    source: Sequence[str] | None = _TITLE_SOURCE,
) -> dict[str, Any]:
    """BM25 on the ``title`` field: the search body the stored template ``semdup-bm25-title`` renders (its
    ``match``, size and exclusion), with the hits' titles from ``_source`` when ``source`` is given.

    Example::

        >>> title_query("visa qatar", 3, source=None)["query"]["bool"]["must"]
        [{'match': {'title': {'query': 'visa qatar'}}}]
    """
    body = template_body("bm25", "title", template_params(text, size=size, exclude_id=exclude_id))
    return {**body, "_source": list(source) if source else False}


@dataclass(frozen=True)
class TitleSource:
    """BM25 on the ``title`` field (:func:`title_query`) as a candidate source, its hits carrying their titles."""

    name = "bm25"

    def request(self, query: SourceQuery) -> dict[str, Any]:
        return with_components(title_query(query.text, query.size, query.exclude_id), query)

    def hits(self, response: Mapping[str, Any], index: str, query: SourceQuery) -> list[Hit]:
        return parse_hits(response, index, self.name)


def _check_title(title: str) -> str:
    """The title, or PostError (422) for one that is empty, only white space, too long or not text."""
    if not isinstance(title, str) or not title.strip():
        raise PostError("title is empty; send the title the asker is typing (at least one visible character)")
    if len(title) > MAX_TITLE_CHARS:
        raise PostError(f"title has {len(title)} characters, over the limit of {MAX_TITLE_CHARS}; send a title")
    check_post(Post("_title", title, ""))
    return title


class TitleSearch:
    """Similar questions of a title (module doc) over the reranker's bundle, client and served indices.

    Args:
        reranker: the service's :class:`~semdup.reranker.reranker.Reranker` (its index checks and companion
            lookup are reused; its candidate settings are not: titles have their own paths).
        fusion: the weights (default :data:`SIMILAR_FUSION`).
        candidates: hits per path.
    """

    def __init__(self, reranker: Reranker, fusion: Mapping[str, float] | None = None, candidates: int = CANDIDATES):
        if candidates < 1:
            raise ValueError(f"candidates must be at least 1, got {candidates}")
        self.reranker = reranker
        self.fusion = check_fusion(fusion or SIMILAR_FUSION)
        self.candidates = candidates

    @property
    def version(self) -> str:
        return self.reranker.version

    def candidates_of(
        self, title: str, index: str | None = None, *, exclude_id: str | None = None, size: int | None = None
    ) -> tuple[TitleCandidates, np.ndarray | None, Any]:
        """The merged candidates of ``title`` (``size`` hits per source, default :attr:`candidates`), and the
        title's encoding (dense vector, BOW weights): one encoding, one ``_msearch``.

        k-NN candidates where the bundle has a dense encoder, the reranker allows them (``knn`` not False) and
        every index behind the one searched maps ``semdup.vector`` as a knn_vector.

        Raises:
            PostError: a bad title. SearchIndexError: an index that does not exist. ModelMismatch: another model's.
        """
        title = _check_title(title)
        rr = self.reranker
        resolved = rr.indices.resolve(index or rr.index, rr.settings)
        encoding = rr.encoder.encode_post(Post("_title", title, ""), with_title=False)
        sources: list[CandidateSource] = [TitleSource()]
        if encoding.vector is not None and resolved.fields.knn:
            sources.append(KnnSource(source=tuple(_TITLE_SOURCE)))
        params = components_params(self.version, encoding.vector, encoding.terms, encoding.vector)
        query = SourceQuery(query_text(title), size or self.candidates, exclude_id, vector=encoding.vector,
                            components=params, lexical_field=lexical_field("bm25", "title"),
                            shards=resolved.shards,
                            global_stats=rr.settings.global_stats(resolved.shards))  # fmt: skip
        found = search(rr.client, resolved.target, sources, query, rr.settings.search_timeout)
        merged = merge(found, primary="bm25")
        cluster = [merged.components.get(i) for i in merged.ids]
        rr.check_models(resolved.target, merged, {})
        lexical = [merged.lexical.get(i, 0.0) for i in merged.ids]
        cands = TitleCandidates(merged.ids, cluster, lexical, merged.sources, merged.titles)
        return cands, encoding.vector, encoding.terms

    def components(self, cands: TitleCandidates, vector: np.ndarray | None, terms: Any) -> dict[str, np.ndarray]:
        """Per-candidate ``cos_title``, ``cos_dense``, ``cos_bow``, ``lexical``, ``lexnorm`` (the query's title
        vector stands for its dense vector too: the query is its title); a candidate the workers have not reached
        carries none (NaN: scored with what it has, ranked after the others)."""
        return merge_components(vector, terms, vector, cands.components, {}, cands.lexical)

    def rank(
        self,
        cands: TitleCandidates,
        comps: Mapping[str, np.ndarray],
        size: int,
        fusion: Mapping[str, float] | None = None,
    ) -> list[SimilarPost]:
        """The top ``size`` candidates by the fused score (complete ones first, ties by id)."""
        scores, complete = compute_fused(comps, check_fusion(fusion) if fusion is not None else self.fusion)
        complete &= np.asarray([c is not None and c[3] >= 0 for c in cands.components], dtype=bool)
        order = sorted(range(len(cands.ids)), key=lambda i: (not complete[i], -scores[i], cands.ids[i]))[:size]
        return [
            SimilarPost(
                id=cands.ids[i],
                score=float(scores[i]),
                title=cands.titles.get(cands.ids[i]),
                sources=tuple(cands.sources.get(cands.ids[i], ())),
                complete=bool(complete[i]),
            )
            for i in order
        ]

    def search(
        self, title: str, index: str | None = None, size: int = 5, *, exclude_id: str | None = None
    ) -> list[SimilarPost]:
        """The ``size`` posts most similar to ``title`` (module doc).

        Raises:
            PostError: an empty, too long or binary title; ValueError: ``size`` out of 1..MAX_SIZE.
        """
        if not 1 <= size <= MAX_SIZE:
            raise ValueError(f"size must be within 1..{MAX_SIZE}, got {size}")
        cands, vector, terms = self.candidates_of(title, index, exclude_id=exclude_id, size=max(size, self.candidates))
        if not cands.ids:
            return []
        return self.rank(cands, self.components(cands, vector, terms), size)
