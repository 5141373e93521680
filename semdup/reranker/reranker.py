"""``Reranker``: a post in, the top-k candidates out, each with its fused score, components and decision.

    reranker = Reranker.from_bundle("artifacts/bundles/t-scqa-semeval", client, "questions")
    for c in reranker.rank(Post("q", "How do I get a visa for Qatar?", "")):
        print(c.id, c.score, c.components, c.probability, c.is_duplicate)

A reranker is candidate sources, fusion and calibration (pyserini's hybrid searcher: searchers, then fusion). One
call, on one path whose critical path is the query's encoding:

1. the index is resolved (:class:`~semdup.reranker.index.ResolvedIndex`: the index searched, the candidate paths
   it serves; once per index);
2. the sources that need no encoding (the lexical templates, :mod:`semdup.reranker.sources`) are asked on a pool
   thread while the calling thread encodes the query (:class:`~semdup.reranker.encoding.QueryEncoder`):
   onnxruntime and the wait for OpenSearch both release the GIL;
3. once the encoding is there, the k-NN (or learned-sparse) source is asked; a lone one as a ``_search`` whose hits
   carry their lexical score as a named query, so the candidates only it found need no second request;
4. the hits are merged (round-robin, without duplicates); every hit carries the candidate's packed vectors and term
   weights, so the fusion (:mod:`semdup.reranker.fusion`) needs no fetch. Only candidates whose hits carried none
   (written before ``semdup.packed`` existed) take one ``mget`` of their ``_source``
   (:class:`~semdup.reranker.stored_fields.StoredFields`);
5. the fused scores are calibrated (:class:`~semdup.reranker.calibration.Calibration`) and the top k returned.

Scores equal ``BundleScorer.score`` on the same candidates; the steps one after the other (encode, one search of
every source, a second request for the lexical scores of the candidates the templates did not find, fuse) give the
same answers to the bit (``tests/unit/reranker/test_query_overlap.py``, ``tests/integration/test_reranker_parity.py``,
against the reference in ``tests/reranker_reference.py``). ``python -m benchmarks.query_profile``
times the call step by step.

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
from semdup.reranker.fusion import compute_components, compute_fused
from semdup.reranker.index import IndexResolver, ModelMismatch, NothingIndexed, ResolvedIndex
from semdup.reranker.settings import RerankerSettings
from semdup.reranker.sources import (
    Candidates,
    CandidateSource,
    KnnSource,
    NamedScoresUnsupported,
    SourceQuery,
    SparseSource,
    TemplateSource,
    lexical_scores,
    merge,
    search,
    search_in_background,
)
from semdup.reranker.stored_fields import FieldCache, StoredFields
from semdup.search_templates import query_text

__all__ = ["Candidate", "Reranker", "ModelMismatch", "NothingIndexed", "QueryEncoding"]

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
        client: an OpenSearch client (:func:`semdup.core.clients.connect`: its errors are semdup's).
        index: the index (or alias) to search.
        settings: candidate paths, sizes and timeouts.
        calibration: Platt scaling and threshold fitted on held-out pairs (overrides the bundle's threshold).

    Attributes:
        fusion: the fusion's weights (the bundle's; an evaluation may set others).
        indices: the indices resolved so far (:class:`~semdup.reranker.index.IndexResolver`).
        encoder: the query encoder (:class:`~semdup.reranker.encoding.QueryEncoder`).
        stored: the ``_source`` read of candidates whose hits carried no packed fields, and its cache.
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
        self.stored = StoredFields(client, self.settings.field_cache)

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

    @property
    def field_cache(self) -> FieldCache | None:
        """The exact field cache (:class:`~semdup.reranker.stored_fields.FieldCache`), None when off."""
        return self.stored.cache

    def with_settings(self, **changes: Any) -> Reranker:
        """The same bundle, client, encoder, resolved indices and field cache with other candidate settings
        (``RerankerSettings`` fields; the field cache's size is the reranker's own: make a new one for another).

        Raises:
            ValueError: a change of ``field_cache``.
        """
        if changes.get("field_cache", self.settings.field_cache) != self.settings.field_cache:
            raise ValueError("field_cache is set when a Reranker is made; make a new Reranker for another size")
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
        learned-sparse and k-NN where the index holds their structures."""
        s = self.settings
        out: list[CandidateSource] = [TemplateSource(m, s.variant) for m in s.templates]
        if resolved.fields.sparse:
            out.append(SparseSource())
        if resolved.fields.knn:
            out.append(KnnSource())
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
        _, cands, encoding = self._retrieve(post, exclude_id, restrict_ids, index)
        return cands, encoding

    def _retrieve(
        self, post: Post, exclude_id: str | None, restrict_ids: Sequence[str] | None, index: str | None
    ) -> tuple[ResolvedIndex, Candidates, QueryEncoding]:
        check_post(post)
        s = self.settings
        resolved = self.indices.resolve(index or self.index, s)
        sources = self.sources(resolved)
        lexical_sources = [x for x in sources if not x.needs_encoding]
        ids = None if restrict_ids is None else tuple(map(str, restrict_ids))
        size = s.k_candidates if ids is None else max(len(ids), 1)
        text = query_text(post.title, post.body if s.variant == "text" else "")
        query = SourceQuery(text, size, None if exclude_id is None else str(exclude_id), ids)
        target, timeout = resolved.target, s.search_timeout
        pending = search_in_background(self.client, target, lexical_sources, query, timeout)
        try:
            encoding = self.encoder.encode_post(post)
            query = replace(query, vector=encoding.vector, terms=encoding.terms)
            vector_sources = [x for x in sources if x.needs_encoding]
            named = self.indices.named_scores and bool(self.fusion.get("alpha"))
            lex = lexical_field(s.templates[0], s.variant) if named else None
            try:
                found = search(self.client, target, vector_sources, query, timeout, lexical_field=lex)
            except NamedScoresUnsupported as exc:
                logger.warning("%s; sparse / k-NN candidates' lexical scores take a second request", exc)
                self.indices.named_scores = False
                found = search(self.client, target, vector_sources, query, timeout)
        finally:
            lexical = pending.result()  # its error first: the cluster's state matters more than the text's
        cands = merge([*lexical, *found], primary=s.templates[0])
        if ids is not None:  # rank exactly these: ones no source found join with lexical score 0
            for rid in ids:
                if rid not in cands.sources and rid != query.exclude_id:
                    cands.ids.append(rid)
                    cands.sources[rid] = ["restrict"]
        return resolved, cands, encoding

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
        resolved, cands, query = self._retrieve(post, exclude_id, restrict_ids, index)
        if not cands.ids:
            return []
        s, target = self.settings, resolved.target
        unscored = [i for i in cands.ids if i not in cands.lexical]
        if unscored and self.fusion.get("alpha", 0.0) != 0.0:
            # found by sparse / k-NN / restrict only, without a named score: ask the first template for theirs
            text = query_text(post.title, post.body if s.variant == "text" else "")
            cands.lexical.update(lexical_scores(self.client, target, text, unscored, model=s.templates[0],
                                                variant=s.variant, timeout=s.search_timeout))  # fmt: skip
        stored: dict[str, dict[str, Any] | None] = dict(cands.fields)
        unread = [i for i in cands.ids if i not in stored]  # hits that carried no packed fields
        if unread:
            stored.update(self.stored.fetch(target, unread, s.search_timeout))
        ids = [i for i in cands.ids if stored.get(i) is not None]  # None = deleted since the search
        docs = [stored[i] for i in ids]
        wrong = sorted({d["model"] for d in docs if d.get("model") not in (None, self.version)})
        if wrong:
            raise ModelMismatch(
                f"candidates in {target!r} were indexed by model {', '.join(wrong)}, but the reranker serves bundle "
                f"{self.version}; serve the index's bundle, or re-index the posts with this one"
            )
        lexical = [cands.lexical.get(i, 0.0) for i in ids]
        comps = compute_components(query.vector, query.terms, docs, lexical, query.title)
        scores, complete = compute_fused(comps, self.fusion)
        complete &= np.asarray([d.get("model") is not None for d in docs], dtype=bool)
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
                sources=tuple(cands.sources.get(ids[i], ())),
            )
            for i in order
        ]

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
