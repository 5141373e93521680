"""``Reranker``: a post in, the top-k candidates out, each with its fused score, components and decision.

    reranker = Reranker.from_bundle("artifacts/bundles/t-scqa-semeval", client, "questions")
    for c in reranker.rank(Post("q", "How do I get a visa for Qatar?", "")):
        print(c.id, c.score, c.components, c.probability, c.is_duplicate)

A reranker is candidate sources, fusion and calibration (pyserini's hybrid searcher: searchers, then fusion). One
call, one round trip to the cluster after the query's encoding:

1. the index is resolved (:class:`~semdup.reranker.index.ResolvedIndex`: the index searched, the candidate paths
   it serves, its shards; once per index);
2. the query is encoded (:class:`~semdup.reranker.encoding.QueryEncoder`: dense vector, BOW weights, title vector);
3. every source (the lexical templates, k-NN, learned-sparse, the posts a caller restricts to;
   :mod:`semdup.reranker.sources`) is asked in one plain ``_msearch``. The scores are computed where the data
   is: each hit carries the fusion's three cosines, computed on the data node by the stored components script
   (:mod:`semdup.search_templates.components`) from the candidate's packed vectors and term weights, and the vector
   sources' hits carry the first template's score (a rescore with its ``match``). Ids and a few floats per hit
   cross the wire, not the packed fields;
4. the hits are merged (round-robin, without duplicates) and fused (:mod:`semdup.reranker.fusion`: lexnorm is a
   min-max over the whole candidate list, so the sum is taken here). Only candidates whose hits carried no
   components (written before the packed format 2) take one ``mget`` of their ``_source``
   (:class:`~semdup.reranker.stored_fields.StoredFields`);
5. the fused scores are calibrated (:class:`~semdup.reranker.calibration.Calibration`) and the top k returned.

Scores equal ``BundleScorer.score`` on the same candidates, and the fusion over the candidates' decoded packed
fields to ~1e-15 (``tests/integration/test_reranker_parity.py``, against the reference in
``tests/reranker_reference.py``). ``python -m benchmarks.query_profile`` times the call step by step.

A candidate stored by another model version is refused (:class:`ModelMismatch`); a candidate the workers
have not reached yet is kept, scored with what it has, ranked after the complete ones and flagged
``complete=False``.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from semdup.bundle.bundle import Bundle
from semdup.core.errors import PostError
from semdup.core.posts import Post
from semdup.core.scoring import TITLE_WEIGHT
from semdup.core.text_pipeline import check_post
from semdup.index_format.schema import lexical_field
from semdup.reranker.calibration import Calibration, calibration_path, load_calibration
from semdup.reranker.encoding import QueryEncoder, QueryEncoding
from semdup.reranker.fusion import compute_fused, merge_components
from semdup.reranker.index import IndexResolver, ModelMismatch, NothingIndexed, ResolvedIndex
from semdup.reranker.settings import RerankerSettings
from semdup.reranker.sources import (
    Candidates,
    CandidateSource,
    KnnSource,
    RestrictSource,
    SourceQuery,
    SparseSource,
    TemplateSource,
    heaviest_terms_text,
    lexical_scores,
    merge,
    search,
)
from semdup.reranker.stored_fields import StoredFields
from semdup.search_templates import query_text
from semdup.search_templates.components import components_params

__all__ = ["Candidate", "FusionInputs", "Reranker", "ModelMismatch", "NothingIndexed", "QueryEncoding"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Candidate:
    """One ranked candidate.

    Attributes:
        id: the post id (``_id`` in the index).
        score: the fused score s = β_bow·cos_bow + β_dense·cos_dense + α·lexnorm.
        components: ``cos_bow``, ``cos_dense``, ``lexical`` (raw primary-template score, 0 = no match),
            ``lexnorm``; None where the model has no such term or the candidate lacks the stored field.
        probability: calibrated P(duplicate) (Platt), None without a calibration.
        is_duplicate: score >= the threshold, None without a threshold.
        complete: False when the candidate's semdup fields are not indexed yet (scored with what it has).
        sources: the candidate sources that found it (``bm25``, ``sparse``, ``knn``, ``restrict``).
    """

    id: str
    score: float
    components: dict[str, float | None]
    probability: float | None = None
    is_duplicate: bool | None = None
    complete: bool = True
    sources: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "score": self.score,
            "components": dict(self.components),
            "probability": self.probability,
            "is_duplicate": self.is_duplicate,
            "complete": self.complete,
            "sources": list(self.sources),
        }


@dataclass(frozen=True)
class FusionInputs:
    """One query's candidates as :meth:`Reranker.rank` fuses them.

    Attributes:
        ids: the candidates still in the index, in the merged order.
        components: per candidate (arrays aligned with ``ids``), as :func:`~semdup.reranker.fusion.merge_components`.
        indexed: False where the candidate's semdup fields are not written yet.
        candidates: the merged candidates (their sources, lexical scores, titles).
        encoding: the query's encoding.
    """

    ids: list[str]
    components: dict[str, np.ndarray]
    indexed: np.ndarray
    candidates: Candidates
    encoding: QueryEncoding


def _check_paths(bundle: Bundle, settings: RerankerSettings) -> None:
    """Refuse candidate paths the bundle has no model for (ValueError naming the setting to drop)."""
    if settings.sparse and bundle.term_weights is None:
        raise ValueError(
            f"bundle {bundle.version} has no learned term weights; learned-sparse candidates need "
            "a bag-of-words model (bow-cnn, bow-minilm): drop sparse=True"
        )
    if settings.knn and bundle.dimension is None:
        raise ValueError(f"bundle {bundle.version} has no dense encoder; drop knn=True")


class Reranker:
    """Candidates from OpenSearch, fused with the bundle's model. Thread-safe (onnxruntime sessions are).

    Args:
        bundle: a loaded :class:`~semdup.bundle.bundle.Bundle`.
        client: an OpenSearch client (:func:`semdup.opensearch_io.clients.connect`: its errors are semdup's).
        index: the index (or alias) to search.
        settings: candidate paths, sizes and timeouts.
        calibration: Platt scaling and threshold fitted on held-out pairs (overrides the bundle's threshold).

    Attributes:
        fusion: the fusion's weights (the bundle's; an evaluation may set others).
        indices: the indices resolved so far (:class:`~semdup.reranker.index.IndexResolver`).
        encoder: the query encoder (:class:`~semdup.reranker.encoding.QueryEncoder`).
        stored: the ``_source`` read of candidates whose hits carried no cosines (posts before the packed format 2).
    """

    def __init__(
        self,
        bundle: Bundle,
        client: Any,
        index: str,
        settings: RerankerSettings | None = None,
        calibration: Calibration | None = None,
    ) -> None:
        self.bundle = bundle
        self.client = client
        self.index = index
        self.settings = settings or RerankerSettings()
        self.calibration = calibration
        self.fusion = dict(bundle.fusion)
        _check_paths(bundle, self.settings)
        self.indices = IndexResolver(client, bundle.version, dense=bundle.dimension is not None)
        self.encoder = QueryEncoder(bundle)
        self.stored = StoredFields(client)

    @classmethod
    def from_bundle(
        cls,
        path: str | Path,
        client: Any,
        index: str,
        options: RerankerSettings | None = None,
        *,
        calibration: str | Path | None = None,
        intra_op_threads: int | None = None,
    ) -> Reranker:
        """Load and verify the bundle, read its calibration (``calibration``, else ``<bundle>.calibration.json``)
        when present; ``options`` are the candidate paths (default: BM25 text, k-NN wherever mapped)."""
        bundle = Bundle.load(path, intra_op_threads=intra_op_threads)
        cal = load_calibration(calibration or calibration_path(path), bundle.version)
        return cls(bundle, client, index, options or RerankerSettings(), cal)

    @property
    def version(self) -> str:
        return self.bundle.version

    @property
    def threshold(self) -> float | None:
        """The duplicate threshold on the fused score: the calibration's (chosen on dev), else the bundle's."""
        if self.calibration is not None and self.calibration.threshold is not None:
            return self.calibration.threshold
        return self.bundle.threshold

    def with_settings(self, **changes: Any) -> Reranker:
        """The same bundle, client, encoder and resolved indices with other candidate settings (``RerankerSettings``
        fields)."""
        other = copy.copy(self)
        other.settings = replace(self.settings, **changes)
        _check_paths(self.bundle, other.settings)
        return other

    def target(self, index: str | None = None) -> str:
        """The index searched for ``index``: itself when semdup created it, else the companion ``semdup enable``
        made for it (:mod:`semdup.index_format.companion`); the answer's ids are the site's ids either way."""
        return self.indices.resolve(index or self.index, self.settings).target

    def empty_reason(self, index: str | None = None) -> str:
        """Why a rerank found no candidates (:meth:`IndexResolver.explain_empty`).

        Raises:
            NothingIndexed: the site's index holds posts but its companion none yet (run the backfill).
        """
        return self.indices.explain_empty(index or self.index, self.settings)

    def sources(self, resolved: ResolvedIndex) -> tuple[CandidateSource, ...]:
        """The candidate sources of this reranker's settings that ``resolved`` serves: each lexical template, then
        learned-sparse and k-NN where the index holds their structures, and the posts a caller restricts to."""
        s = self.settings
        out: list[CandidateSource] = [TemplateSource(m, s.variant) for m in s.templates]
        if resolved.fields.sparse:
            out.append(SparseSource())
        if resolved.fields.knn:
            out.append(KnnSource())
        out.append(RestrictSource())  # asks only when the caller restricts the candidates
        return tuple(out)

    # --- one query ---------------------------------------------------------------------------
    def retrieve(
        self,
        post: Post,
        *,
        exclude_id: str | None = None,
        restrict_ids: Sequence[str] | None = None,
        index: str | None = None,
    ) -> tuple[Candidates, QueryEncoding]:
        """The merged candidates of ``post`` (before fusion), and the query's encoding (module doc, steps 1-4).

        Raises:
            PostError: empty or binary text. SearchIndexError: unknown index. ModelMismatch: another model's index.
            OpenSearchUnavailable / SearchTimeout: the cluster is down or too slow.
        """
        _, cands, encoding, _ = self._retrieve(post, exclude_id, restrict_ids, index)
        return cands, encoding

    def _retrieve(
        self, post: Post, exclude_id: str | None, restrict_ids: Sequence[str] | None, index: str | None
    ) -> tuple[ResolvedIndex, Candidates, QueryEncoding, str]:
        """The resolved index, the merged candidates, the query's encoding and the text its lexical sources matched."""
        check_post(post)
        s = self.settings
        resolved = self.indices.resolve(index or self.index, s)
        ids = None if restrict_ids is None else tuple(map(str, restrict_ids))
        encoding = self.encoder.encode_post(post)
        params = components_params(self.version, encoding.vector, encoding.terms, encoding.title)
        query = SourceQuery(
            text=self.lexical_text(post, encoding),
            size=s.k_candidates if ids is None else max(len(ids), 1),
            exclude_id=None if exclude_id is None else str(exclude_id),
            restrict_ids=ids,
            vector=encoding.vector,
            terms=encoding.terms,
            components=params,
            lexical_field=lexical_field(s.templates[0], s.variant),
            shards=resolved.shards,
            global_stats=s.global_stats(resolved.shards),
        )
        found = search(self.client, resolved.target, self.sources(resolved), query, s.search_timeout)
        return resolved, merge(found, primary=s.templates[0]), encoding, query.text

    def lexical_text(self, post: Post, encoding: QueryEncoding) -> str:
        """What the lexical templates match: the variant's text (title + body, or the title), cut to its
        ``lexical_terms`` heaviest terms where the bundle weighs terms (:func:`heaviest_terms_text`)."""
        s = self.settings
        body = post.body if s.variant == "text" else ""
        text = query_text(post.title, body)
        if not s.lexical_terms or encoding.terms is None:
            return text
        tokens = self.bundle.pipeline.tokens(f"{post.title} {body}")
        return query_text(heaviest_terms_text(tokens, encoding.terms, s.lexical_terms)) or text

    def fusion_inputs(
        self,
        post: Post,
        *,
        exclude_id: str | None = None,
        restrict_ids: Sequence[str] | None = None,
        index: str | None = None,
    ) -> FusionInputs | None:
        """What :meth:`rank` fuses: the candidates of ``post`` still in the index, their components (the lexical
        scores of the other sources' candidates asked for, the stored fields of those written before the packed
        format read), and which of them are indexed; None when nothing was found.

        Raises:
            As :meth:`rank`.
        """
        resolved, cands, query, text = self._retrieve(post, exclude_id, restrict_ids, index)
        if not cands.ids:
            return None
        s, target = self.settings, resolved.target
        unscored = [i for i in cands.ids if i not in cands.lexical]
        if unscored and self.fusion.get("alpha", 0.0) != 0.0:
            # found by another template only: ask the first template for their scores, matching the same text
            cands.lexical.update(lexical_scores(self.client, target, text, unscored, model=s.templates[0],
                                                variant=s.variant, timeout=s.search_timeout,
                                                global_stats=s.global_stats(resolved.shards)))  # fmt: skip
        unread = [i for i in cands.ids if i not in cands.components]  # written before the packed format 2
        stored = self.stored.fetch(target, unread, s.search_timeout) if unread else {}
        ids = [i for i in cands.ids if i in cands.components or stored.get(i) is not None]  # None: deleted since
        cluster = [cands.components.get(i) for i in ids]
        self.check_models(target, cands, stored)
        local = {n: stored[i] for n, i in enumerate(ids) if cluster[n] is None}
        lexical = [cands.lexical.get(i, 0.0) for i in ids]
        comps = merge_components(query.vector, query.terms, query.title, cluster, local, lexical)
        indexed = [c[3] >= 0 if c is not None else local[n].get("model") is not None for n, c in enumerate(cluster)]
        return FusionInputs(ids, comps, np.asarray(indexed, dtype=bool), cands, query)

    def rank(
        self,
        post: Post,
        k: int = 10,
        exclude_id: str | None = None,
        restrict_ids: Sequence[str] | None = None,
        index: str | None = None,
    ) -> list[Candidate]:
        """The top ``k`` candidates for ``post``, best first.

        Raises:
            PostError: empty or binary text. SearchIndexError: unknown index. ModelMismatch: another model's vectors.
            OpenSearchUnavailable / SearchTimeout: the cluster is down or too slow.
        """
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        found = self.fusion_inputs(post, exclude_id=exclude_id, restrict_ids=restrict_ids, index=index)
        if found is None:
            return []
        ids, comps, query = found.ids, found.components, found.encoding
        scores, complete = compute_fused(comps, self.fusion)
        complete &= found.indexed
        prob = self.calibration.probability(scores) if self.calibration is not None else None
        threshold = self.threshold
        # complete candidates first, each group by score; ties broken by id for a stable answer
        order = sorted(range(len(ids)), key=lambda i: (not complete[i], -scores[i], ids[i]))[:k]
        weights = {
            "cos_bow": self.fusion["beta_bow"] if query.terms is not None else None,
            "cos_dense": self.fusion["beta_dense"] if query.vector is not None else None,
            "lexical": 1.0,
            "lexnorm": 1.0,
        }
        if self.bundle.uses_title:
            weights["cos_title"] = self.fusion.get(TITLE_WEIGHT, 0.0)
        incomplete = int((~complete).sum())
        if incomplete:
            logger.warning(
                "%d of %d candidates have no semdup fields yet; they are ranked after the others: run "
                "`semdup backfill` or check the indexing workers",
                incomplete,
                len(ids),
            )
        return [
            Candidate(
                id=ids[i],
                score=float(scores[i]),
                components={n: None if w is None or np.isnan(comps[n][i]) else float(comps[n][i])
                            for n, w in weights.items()},  # fmt: skip
                probability=None if prob is None else float(prob[i]),
                is_duplicate=None if threshold is None or not complete[i] else bool(scores[i] >= threshold),
                complete=bool(complete[i]),
                sources=tuple(found.candidates.sources.get(ids[i], ())),
            )
            for i in order
        ]

    def check_models(self, target: str, cands: Candidates, stored: dict[str, dict[str, Any] | None]) -> None:
        """Refuse candidates indexed by another model (ModelMismatch naming it), as the cluster's components script
        or the stored fields of those read from ``_source`` say."""
        wrong = set(cands.other_models.values())
        wrong |= {(d or {}).get("model") for d in stored.values()} - {None, self.version}
        if wrong:
            raise ModelMismatch(
                f"candidates in {target!r} were indexed by model {', '.join(sorted(map(str, wrong)))}, but the "
                f"reranker serves bundle {self.version}; serve the index's bundle, or re-index the posts with this one"
            )

    def rank_batch(
        self,
        posts: Sequence[Post],
        k: int = 10,
        exclude_ids: Sequence[str | None] | None = None,
        restrict_ids: Sequence[Sequence[str] | None] | None = None,
        index: str | None = None,
        on_error: str = "raise",
    ) -> dict[str, list[Candidate]]:
        """``rank`` for several posts: post id → candidates.

        Args:
            on_error: ``raise`` stops at the first bad post; ``skip`` logs it and leaves it out (its id is missing
                from the answer, and the count of skipped posts is logged).
        """
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        out: dict[str, list[Candidate]] = {}
        skipped = 0
        for i, post in enumerate(posts):
            try:
                out[post.id] = self.rank(
                    post,
                    k=k,
                    exclude_id=exclude_ids[i] if exclude_ids else None,
                    restrict_ids=restrict_ids[i] if restrict_ids else None,
                    index=index,
                )
            except PostError as exc:
                if on_error == "raise":
                    raise
                skipped += 1
                logger.warning("post %s skipped: %s", post.id, exc)
        if skipped:
            logger.warning("%d of %d posts were skipped as unusable; fix their text to rank them", skipped, len(posts))
        return out
