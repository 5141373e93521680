"""``semdup eval stackexchange``: retrieve each query's duplicates from the whole community (BOW-CNN's protocol).

Every post of the dump is indexed; each query of the split searches all posts but itself. Lexical methods
run their search template (top 100); trained scorers score the query against every post exhaustively.
Measures: Accuracy@1/5/10, MAP and MRR over the top 100 (``retrieval_scores``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from semdup.data import StackExchangeDump
from semdup.evaluation.methods import Method, load_scorer
from semdup.ingest.lexical_index import create_index, delete_index, load_posts
from semdup.measures.protocols import rank_corpus
from semdup.measures.ranking import retrieval_scores
from semdup.opensearch_io.boundary import OpenSearch
from semdup.search_templates import msearch_templates, query_text, register_templates, template_id, template_params

__all__ = ["RetrievalRun", "run_stackexchange", "TOP"]

logger = logging.getLogger(__name__)

TOP = 100


@dataclass
class RetrievalRun:
    method: str
    split: str
    metrics: dict[str, float]
    ranked: dict[str, list[tuple[str, float]]] = field(repr=False)


def run_stackexchange(
    dump: StackExchangeDump,
    split: str,
    methods: Sequence[Method],
    *,
    client: OpenSearch | None,
    variant: str = "text",
    keep_index: bool = False,
    progress: bool = True,
) -> list[RetrievalRun]:
    """Run every method on one split; lexical methods share one fresh index of all posts."""
    queries = dump.queries(split)
    relevant = {q.post.id: set(q.relevant) for q in queries}
    corpus = dump.corpus()
    runs = []
    index = None
    try:
        if any(m.lexical for m in methods):
            if client is None:
                raise ValueError("lexical methods need OpenSearch; pass a client")
            index = f"semdup-eval-se-{uuid.uuid4().hex[:8]}"
            create_index(client, index)
            load_posts(client, index, corpus, progress=progress)
            register_templates(client)
        for method in methods:
            if method.lexical:
                tid = template_id(method.name, variant)
                requests = [
                    (tid, template_params(query_text(q.post.title, q.post.body if variant == "text" else ""),
                                          size=TOP, exclude_id=q.post.id))
                    for q in queries
                ]
                hits = msearch_templates(client, index, requests)
                ranked = {q.post.id: [(h.id, h.score) for h in qh] for q, qh in zip(queries, hits, strict=True)}
            elif method.kind == "bundle" and client is not None:
                # through the query-time Reranker (BM25's top 100 reranked): the service's figures
                from semdup.evaluation.through_reranker import stackexchange_ranking

                ranked = stackexchange_ranking(client, queries, corpus, method.path, variant, TOP,
                                               keep_index=keep_index, progress=progress)
            else:
                ranked = _exhaustive(load_scorer(method, progress=progress), [q.post for q in queries], corpus)
            metrics = retrieval_scores({q: [d for d, _ in r] for q, r in ranked.items()}, relevant, cutoff=TOP)
            runs.append(RetrievalRun(method.name, split, metrics, ranked))
    finally:
        if index is not None and not keep_index:
            delete_index(client, index)
    return runs


def _exhaustive(scorer, queries, corpus) -> dict[str, list[tuple[str, float]]]:
    scores = scorer.score_matrix(queries, corpus)
    return rank_corpus(scores, [q.id for q in queries], [p.id for p in corpus], TOP)  # the one Travel ranking
