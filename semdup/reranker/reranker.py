"""``Reranker``: a post in, the top-k candidates out, each with its fused score, components and decision.

    reranker = Reranker.from_bundle("artifacts/bundles/t-scqa-semeval", client, "questions")
    for c in reranker.rank(Post("q", "How do I get a visa for Qatar?", "")):
        print(c.id, c.score, c.components, c.probability, c.is_duplicate)

One call, its steps overlapped so that the query's encoding is its critical path (issue #19):

1. the lexical templates' ``_msearch/template`` (BM25 …) leaves on a pool thread, and the title's encoding (a
   bundle with a title term) on another, while the calling thread encodes the body: onnxruntime and the wait for
   OpenSearch both release the GIL. The title is a second onnxruntime run, not a batch with the body: batched, it
   would be padded to the body's length, and each run alone gives exactly the sequential vectors;
2. once the vector is there, the k-NN (or learned-sparse) query goes as one ``_search`` whose hits carry their BM25
   score as a named query (:func:`~semdup.reranker.path_search.with_lexical_score`): the candidates only k-NN found
   need no second request for the lexical score the fusion reads;
3. every hit carries the candidate's packed vectors and term weights as docvalue fields
   (:mod:`semdup.reranker.candidates`), so the bundle's fusion (:mod:`semdup.reranker.fusion`) needs no fetch. Only
   candidates whose hits carried none (written before ``semdup.packed`` existed, not indexed yet) take one ``mget``
   of their ``_source``.

``Reranker.overlap = False`` runs the same steps one after the other (encode the body, the title, one
``_msearch/template`` of every path, a second request for the k-NN-only candidates' lexical scores): the reference
the overlapped call equals to the bit (``tests/unit/reranker/test_query_overlap.py``,
``tests/integration/test_reranker_parity.py``). Scores equal ``BundleScorer.score`` on the same candidates.
``python -m semdup.evaluation.benchmarks.query_profile`` times both, step by step.

A candidate stored by another model version is refused (:class:`ModelMismatch`); a candidate the workers
have not reached yet is kept, scored with what it has, ranked after the complete ones and flagged
``complete=False``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from semdup.bundle.bundle import Bundle
from semdup.core.errors import PostError, SearchIndexError
from semdup.core.index_names import check_index_name
from semdup.core.posts import Post
from semdup.core.scoring import TITLE_WEIGHT
from semdup.core.text_pipeline import check_post
from semdup.index_format.companion import search_target
from semdup.index_format.mapping import candidate_fields, index_model
from semdup.index_format.schema import CandidateFields, lexical_field
from semdup.reranker.calibration import Calibration, calibration_path, load_calibration
from semdup.reranker.candidates import (
    CandidateSet,
    NamedScoresUnsupported,
    call_opensearch,
    fetch_semdup_fields,
    lexical_scores_for,
    register_query_template,
)
from semdup.reranker.field_cache import UUID_TTL_S, FieldCache
from semdup.reranker.fusion import compute_components, compute_fused
from semdup.reranker.path_search import PathHits, merge_paths, search_candidates, search_paths
from semdup.reranker.settings import RerankerSettings
from semdup.search_templates import ensure_templates, query_text

__all__ = ["Candidate", "Reranker", "ModelMismatch", "NothingIndexed", "QueryEncoding"]

# searches overlapped with the query encoding (threads start on demand)
_SEARCH_THREADS = 64
_pool_lock = threading.Lock()
_search_pool: tuple[int, ThreadPoolExecutor] | None = None  # (pid, pool): a forked child makes its own


def _searches() -> ThreadPoolExecutor:
    global _search_pool
    with _pool_lock:
        if _search_pool is None or _search_pool[0] != os.getpid():
            pool = ThreadPoolExecutor(max_workers=_SEARCH_THREADS, thread_name_prefix="semdup-search")
            _search_pool = (os.getpid(), pool)
        return _search_pool[1]


logger = logging.getLogger(__name__)


class ModelMismatch(SearchIndexError):
    """The index holds vectors of another bundle version than the reranker's (the service answers 409)."""


class NothingIndexed(SearchIndexError):
    """The site's index holds posts but semdup has encoded none of them yet (the service answers 409): a rerank
    would answer nothing, which must never look like "no duplicates"."""


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
        sources: the candidate paths that found it (``bm25``, ``sparse``, ``knn``, ``restrict``).
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


def _component(x: float, weight: float | None) -> float | None:
    return None if weight is None or np.isnan(x) else float(x)


@dataclass(frozen=True)
class QueryEncoding:
    """The query as the fusion reads it: dense vector, BOW weights, and the title's own vector (each None when the
    bundle has no such path, the title also when the query has none)."""

    vector: np.ndarray | None
    terms: dict[str, float] | None
    title: np.ndarray | None = None


class Reranker:
    """Candidates from OpenSearch, fused with the bundle's model. Thread-safe (onnxruntime sessions are).

    Args:
        bundle: a loaded :class:`~semdup.bundle.bundle.Bundle`.
        client: an ``opensearchpy.OpenSearch`` client.
        index: the index (or alias) to search.
        settings: candidate paths, sizes and timeouts.
        calibration: Platt scaling and threshold fitted on held-out pairs (overrides the bundle's threshold).
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
        self._checked: dict[str, bool] = {}
        self._lock = threading.Lock()
        self._query_template: str | None | bool = False  # False = not registered yet
        self._templates_ensured: set[tuple[str, str]] = set()  # (model, variant) checked stored in the cluster
        self.field_cache = FieldCache(self.settings.field_cache) if self.settings.field_cache else None
        self._uuids: dict[str, tuple[float, dict[str, str]]] = {}
        self._paths: dict[str, CandidateFields] = {}  # index -> the hybrid candidate paths it can serve
        self._targets: dict[str, str] = {}  # index asked for -> the index searched (itself, or its companion)
        # the lexical search and the title's encoding overlap the query's encoding; False: one after the other
        self.overlap = True
        self._named_scores = True  # sparse / k-NN hits carry their lexical score (False: the cluster cannot)
        # the query's wordpiece limit (a transformer bundle); None: the bundle's own (its tokenizer's max_len)
        self.query_wordpieces: int | None = None
        if self.settings.sparse and bundle.term_weights is None:
            raise ValueError(
                f"bundle {bundle.version} has no learned term weights; learned-sparse candidates need "
                "a bag-of-words model (bow-cnn, bow-minilm): drop sparse=True"
            )
        if self.settings.knn and bundle.dimension is None:
            raise ValueError(f"bundle {bundle.version} has no dense encoder; drop knn=True")

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

    def check_index(self, index: str | None = None) -> None:
        """Refuse an index whose ``_meta.semdup_model`` is another bundle version (cached once it passed).

        Raises:
            ConfigError: a name that is not one index or alias (``*``, ``_all``, ``a,b``, ``_search``, ``.hidden``;
                :func:`~semdup.core.index_names.check_index_name`). SearchIndexError: the index does not exist.
            ModelMismatch: it holds another model's vectors.
        """
        name = index or self.index
        if self._checked.get(name):
            return
        check_index_name(name)  # before any request: a pattern would search every index, '_search' is an endpoint
        target = search_target(self.client, name, self.version)
        models = index_model(self.client, target)
        wrong = {k: v for k, v in models.items() if v is not None and v != self.version}
        if wrong:
            concrete, other = next(iter(wrong.items()))
            raise ModelMismatch(
                f"index {concrete!r} holds vectors of model {other}, but the reranker serves bundle {self.version}; "
                f"serve bundle {other}, or index the posts with {self.version} into a new index and point an alias"
            )
        auto_knn = self.settings.knn is None and self.bundle.dimension is not None
        paths = CandidateFields(self.settings.sparse, bool(self.settings.knn) or auto_knn)
        if paths.sparse or paths.knn:
            paths = self._searchable(target, paths, quiet={"knn"} if auto_knn else set())
        self._ensure_templates()
        with self._lock:
            self._checked[name] = True
            self._paths[name] = paths
            self._targets[name] = target

    def target(self, index: str | None = None) -> str:
        """The index searched for ``index``: itself when semdup created it, else the companion ``semdup enable``
        made for it (:mod:`semdup.index_format.companion`); the answer's ids are the site's ids either way."""
        name = index or self.index
        self.check_index(name)
        return self._targets.get(name, name)

    def empty_reason(self, index: str | None = None) -> str:
        """Why a rerank found no candidates (one count per side; asked only when the answer is empty).

        Raises:
            NothingIndexed: the site's index holds posts but its companion none yet (run the backfill).
        """
        name = index or self.index
        target = self.target(name)
        ours = self._count(target)
        if target != name and ours == 0:
            theirs = self._count(name)
            if theirs:
                raise NothingIndexed(
                    f"index {name!r} holds {theirs} posts but semdup has encoded none of them yet; run "
                    f"`semdup backfill --index {name}` with workers running (then `semdup watch` keeps it current)"
                )
        if ours == 0:
            return f"index {name!r} holds no posts yet"
        paths = ", ".join(self.settings.templates)
        return (
            f"none of the {ours} indexed posts matched the query's words ({paths} candidates); a post with other "
            "words can still be a duplicate: k-NN candidates (--knn, an index with a vector field) find those"
        )

    def _count(self, index: str) -> int:
        resp = call_opensearch(
            self.client.count,
            f"counting the posts of {index!r}",
            index=index,
            params={"request_timeout": self.settings.search_timeout},
        )
        return int(resp["count"])

    def _searchable(
        self, name: str, wanted: CandidateFields, quiet: set[str] | frozenset[str] = frozenset()
    ) -> CandidateFields:
        """Which of the wanted hybrid candidate paths every concrete index behind ``name`` can serve (warn once
        about the others: the index was created or enabled without ``--sparse`` / ``--knn``; not about the
        ``quiet`` ones, wanted only where the index has them)."""
        out = wanted & candidate_fields(self.client, name)
        for path, flag in (("learned-sparse", "sparse"), ("k-NN", "knn")):
            if getattr(wanted, flag) and not getattr(out, flag) and flag not in quiet:
                logger.warning(
                    "%s candidates are off for %s: its mapping lacks their search structure; add it with "
                    "`semdup enable --index %s --%s` and a backfill, or drop %s",
                    path,
                    name,
                    name,
                    flag,
                    flag,
                )
        return out

    def _index_uuids(self, name: str) -> dict[str, str]:
        """Concrete index name -> uuid for ``name`` (an index or alias), re-read every ``UUID_TTL_S`` seconds."""
        now = time.monotonic()
        cached = self._uuids.get(name)
        if cached is not None and now - cached[0] < UUID_TTL_S:
            return cached[1]
        resp = call_opensearch(
            self.client.indices.get_settings,
            f"reading the settings of {name!r}",
            index=name,
            params={"filter_path": "*.settings.index.uuid", "request_timeout": self.settings.search_timeout},
        )
        uuids = {k: v["settings"]["index"]["uuid"] for k, v in resp.items()}
        with self._lock:
            self._uuids[name] = (now, uuids)
        return uuids

    # --- one query ---------------------------------------------------------------------------
    def candidates(
        self,
        post: Post,
        *,
        exclude_id: str | None = None,
        restrict_ids: Sequence[str] | None = None,
        index: str | None = None,
    ) -> tuple[CandidateSet, QueryEncoding]:
        """The merged candidate set, and the query's encoding (encoded once)."""
        check_post(post)
        name = self.target(index or self.index)
        s = self.settings
        paths = self._paths.get(index or self.index, CandidateFields())
        self._ensure_templates()
        query_template = None
        if paths.sparse or paths.knn:
            if self._query_template is False:
                with self._lock:
                    self._query_template = register_query_template(self.client, s.search_timeout)
            query_template = self._query_template or None

        text = query_text(post.title, post.body if s.variant == "text" else "")
        size = s.k_candidates if restrict_ids is None else max(len(restrict_ids), 1)
        common: dict[str, Any] = {
            "variant": s.variant,
            "size": size,
            "timeout": s.search_timeout,
            "exclude_id": exclude_id,
            "restrict_ids": restrict_ids,
        }
        if not self.overlap:  # one step after the other (the reference the overlapped path must equal)
            query = self._encode(post, concurrent=False)
            cands = search_candidates(
                self.client,
                name,
                text,
                templates=s.templates,
                sparse_terms=query.terms if paths.sparse else None,
                knn_vector=query.vector if paths.knn else None,
                query_template=query_template,
                **common,
            )
        else:  # the lexical search runs while the query is encoded (see the module doc)
            pending = _searches().submit(search_paths, self.client, name, text, templates=s.templates, **common)
            try:
                query = self._encode(post)
                vector = self._vector_paths(name, text, query, paths, query_template, common)
            finally:
                lexical = pending.result()  # its error first: the cluster's state matters more than the text's
            cands = merge_paths([lexical, vector], primary=s.templates[0])
        if restrict_ids is not None:  # rank exactly these: ones no path matched join with lexical score 0
            for rid in restrict_ids:
                if str(rid) not in cands.sources and str(rid) != exclude_id:
                    cands.ids.append(str(rid))
                    cands.sources[str(rid)] = ["restrict"]
        return cands, query

    def _vector_paths(
        self,
        name: str,
        text: str,
        query: QueryEncoding,
        paths: CandidateFields,
        query_template: str | None,
        common: dict[str, Any],
    ) -> PathHits:
        """The learned-sparse and k-NN paths (none: nothing to ask), their hits carrying their lexical score when
        the fusion reads it and the cluster can (:func:`~semdup.reranker.path_search.with_lexical_score`)."""
        terms = query.terms if paths.sparse else None
        vector = query.vector if paths.knn else None
        if not terms and vector is None:
            return PathHits()
        s = self.settings
        lex = lexical_field(s.templates[0], s.variant) if self._named_scores and self.fusion.get("alpha") else None
        search = partial(
            search_paths, self.client, name, text, templates=(), sparse_terms=terms, knn_vector=vector,
            query_template=query_template, **common,
        )  # fmt: skip
        try:
            return search(lexical_field=lex)
        except NamedScoresUnsupported as exc:
            logger.warning("%s; sparse / k-NN candidates' lexical scores take a second request", exc)
            self._named_scores = False
            return search(lexical_field=None)

    def _encode(self, post: Post, concurrent: bool = True) -> QueryEncoding:
        """The query's vector and terms, and its title's vector when the fusion reads it: encoded on a pool thread
        beside the body's (two onnxruntime runs at once, each exact; batched together, the title would be padded
        to the body's length)."""
        cut = self.query_wordpieces
        encode = self.bundle.encode_query if cut is None else partial(self.bundle.encode_query, max_wordpieces=cut)
        if not (self.bundle.uses_title and post.title):
            vector, terms = encode(post)
            return QueryEncoding(vector, terms, None)
        if not concurrent:
            vector, terms = encode(post)
            return QueryEncoding(vector, terms, self.bundle.encode_titles([post])[0])
        pending = _searches().submit(self.bundle.encode_titles, [post])
        try:
            vector, terms = encode(post)
        finally:
            title = pending.result()[0]
        return QueryEncoding(vector, terms, title)

    def _ensure_templates(self) -> None:
        """Store the lexical templates this reranker searches with, once per process, if the cluster lacks them
        (a cluster nobody ran the evaluation on has none: every search would answer "no requests added").

        Done with the index check, the first contact with the cluster; ``candidates`` repeats it for templates
        chosen per request (:meth:`with_settings`), a no-op once they are stored."""
        s = self.settings
        wanted = {(m, s.variant) for m in s.templates}
        if wanted <= self._templates_ensured:
            return
        with self._lock:
            missing = sorted(wanted - self._templates_ensured)
            if missing:
                ensure_templates(self.client, [m for m, _ in missing], [s.variant], s.search_timeout)
                self._templates_ensured.update(missing)

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
        cands, query = self.candidates(post, exclude_id=exclude_id, restrict_ids=restrict_ids, index=index)
        if not cands.ids:
            return []
        name = self.target(index or self.index)
        s = self.settings
        if self.fusion.get("alpha", 0.0) != 0.0:
            unscored = [i for i in cands.ids if i not in cands.lexical and i not in cands.scored]
            if unscored:  # found by sparse / k-NN / restrict only: ask the primary template for their score
                cands.lexical.update(
                    lexical_scores_for(
                        self.client,
                        name,
                        query_text(post.title, post.body if s.variant == "text" else ""),  # ~1 ms: only when needed
                        unscored,
                        model=s.templates[0],
                        variant=s.variant,
                        timeout=s.search_timeout,
                    )
                )
        stored: dict[str, dict[str, Any] | None] = dict(cands.fields)
        unread = [i for i in cands.ids if i not in stored]  # hits that carried no packed fields
        if unread:
            uuids = self._index_uuids(name) if self.field_cache is not None else None
            stored.update(
                fetch_semdup_fields(
                    self.client, name, unread, timeout=s.search_timeout, cache=self.field_cache, uuids=uuids
                )
            )
        ids = [i for i in cands.ids if stored.get(i) is not None]  # None = deleted since the search
        docs = [stored[i] for i in ids]
        wrong = sorted({d["model"] for d in docs if d.get("model") not in (None, self.version)})
        if wrong:
            raise ModelMismatch(
                f"candidates in {name!r} were indexed by model {', '.join(wrong)}, but the reranker serves bundle "
                f"{self.version}; serve the index's bundle, or re-index the posts with this one"
            )
        lexical = [cands.lexical.get(i, 0.0) for i in ids]
        return self._score(ids, docs, lexical, query, cands.sources, k)

    def _score(
        self,
        ids: list[str],
        docs: list[dict[str, Any]],
        lexical: list[float],
        query: QueryEncoding,
        sources: dict[str, list[str]],
        k: int,
    ) -> list[Candidate]:
        q_vec, q_terms = query.vector, query.terms
        comps = compute_components(q_vec, q_terms, docs, lexical, query.title)
        scores, complete = compute_fused(comps, self.fusion)
        has_model = [d.get("model") is not None for d in docs]
        complete &= np.asarray(has_model, dtype=bool)
        prob = self.calibration.probability(scores) if self.calibration is not None else None
        threshold = self.threshold
        # complete candidates first, each group by score; ties broken by id for a stable answer
        order = sorted(range(len(ids)), key=lambda i: (not complete[i], -scores[i], ids[i]))[:k]
        weights = {
            "cos_bow": self.fusion["beta_bow"] if q_terms is not None else None,
            "cos_dense": self.fusion["beta_dense"] if q_vec is not None else None,
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
                components={name: _component(comps[name][i], weights[name]) for name in weights},
                probability=None if prob is None else float(prob[i]),
                is_duplicate=None if threshold is None or not complete[i] else bool(scores[i] >= threshold),
                complete=bool(complete[i]),
                sources=tuple(sources.get(ids[i], ())),
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

    def with_settings(self, **changes: Any) -> Reranker:
        """The same bundle and client with other candidate settings (shares the onnxruntime session)."""
        other = Reranker(self.bundle, self.client, self.index, replace(self.settings, **changes), self.calibration)
        if (other.settings.knn, other.settings.sparse) == (self.settings.knn, self.settings.sparse):
            other._checked, other._paths, other._targets = self._checked, self._paths, self._targets
        other._query_template = self._query_template
        other.overlap, other._named_scores = self.overlap, self._named_scores
        other.query_wordpieces = self.query_wordpieces
        other._templates_ensured = self._templates_ensured
        if other.settings.field_cache == self.settings.field_cache:
            other.field_cache, other._uuids = self.field_cache, self._uuids
        return other
