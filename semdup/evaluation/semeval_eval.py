"""``semdup eval semeval``: rank each original question's candidates and score with the official rules.

Two modes:

* ``rerank``: each original question's 10 gold candidates are ranked (for lexical methods the template is
  restricted to those 10 ids; candidates sharing no term with the query get a score below every matched one).
* ``retrieve``: candidates come from all of the set's related questions (top ``k`` of the lexical model, or
  of BM25 for trained scorers, which then rescore them); a gold candidate not retrieved gets a score below
  every retrieved one.

The related questions are indexed into a fresh index (dropped afterwards unless ``keep_index``), so index
statistics (IDF, collection model) come from the set itself.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from semdup.core.progress import progress as progress_bar
from semdup.data import SemEvalSet
from semdup.evaluation.methods import Method, load_scorer
from semdup.ingest.lexical_index import create_index, delete_index, load_posts
from semdup.measures.ranking import complete_scores, semeval_scores
from semdup.opensearch_io.boundary import OpenSearch
from semdup.search_templates import msearch_templates, query_text, register_templates, template_id, template_params

__all__ = ["SemEvalRun", "run_semeval", "MODES"]

logger = logging.getLogger(__name__)

MODES = ("rerank", "retrieve")


@dataclass
class SemEvalRun:
    method: str
    mode: str
    metrics: dict[str, float]
    predictions: dict[str, dict[str, float]] = field(repr=False)
    threshold: float | None = None


def _lexical_predictions(
    client: OpenSearch, index: str, sem: SemEvalSet, model: str, mode: str, variant: str, k: int
) -> dict[str, dict[str, float]]:
    tid = template_id(model, variant)
    requests = []
    for q in sem.questions:
        ids = [r.post.id for r in q.related]
        text = query_text(q.post.title, q.post.body if variant == "text" else "")
        if mode == "rerank":
            requests.append((tid, template_params(text, size=len(ids), ids=ids)))
        else:
            requests.append((tid, template_params(text, size=k)))
    hits = msearch_templates(client, index, requests)
    preds = {}
    for q, qhits in zip(sem.questions, hits, strict=True):
        ids = [r.post.id for r in q.related]
        wanted = set(ids)
        preds[q.post.id] = complete_scores({h.id: h.score for h in qhits if h.id in wanted}, ids)
    return preds


def _scorer_predictions(
    client: OpenSearch | None, index: str | None, sem: SemEvalSet, method: Method, mode: str, variant: str, k: int,
    progress: bool,
) -> tuple[dict[str, dict[str, float]], float | None]:
    scorer = load_scorer(method)
    lexical_rows: list[dict[str, float]] | None = None
    if client is not None and index is not None:
        lexical_rows = []
        bm25 = _lexical_predictions(client, index, sem, "bm25", mode, variant, k)
        for q in sem.questions:
            lexical_rows.append(bm25[q.post.id])
    preds = {}
    for i, q in enumerate(progress_bar(sem.questions, desc=f"scoring {method.name}", enabled=progress)):
        related = list(q.related)
        if mode == "retrieve" and lexical_rows is not None:
            # rescore only what BM25 retrieved among the gold candidates; the rest stay below
            floor = min(lexical_rows[i].values())
            related = [r for r in related if lexical_rows[i][r.post.id] > floor] or related
        lex = [lexical_rows[i][r.post.id] for r in related] if lexical_rows is not None else None
        scores = scorer.score(q.post, [r.post for r in related], lexical=lex)
        preds[q.post.id] = complete_scores({r.post.id: float(s) for r, s in zip(related, scores, strict=True)},
                                     [r.post.id for r in q.related])
    return preds, getattr(scorer, "threshold", None)


def run_semeval(
    sem: SemEvalSet,
    methods: Sequence[Method],
    *,
    client: OpenSearch | None,
    mode: str = "rerank",
    variant: str = "text",
    k: int = 20,
    keep_index: bool = False,
    progress: bool = True,
) -> list[SemEvalRun]:
    """Run every method on one set, sharing one fresh index; returns one run per method.

    ``client`` may be None only for trained scorers in rerank mode (no lexical term needed).
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; accepted: {', '.join(MODES)}")
    needs_index = client is not None
    if any(m.lexical for m in methods) and client is None:
        raise ValueError("lexical methods need OpenSearch; pass a client")
    index = None
    gold = sem.gold()
    runs = []
    try:
        if needs_index:
            index = f"semdup-eval-{re.sub('[^a-z0-9]+', '-', sem.name.lower()).strip('-')[:40]}-{uuid.uuid4().hex[:8]}"
            create_index(client, index)
            load_posts(client, index, sem.related_posts(), progress=progress)
            register_templates(client)
        for method in methods:
            threshold = None
            if method.lexical:
                preds = _lexical_predictions(client, index, sem, method.name, mode, variant, k)
            elif method.kind == "bundle" and client is not None:
                # through the query-time Reranker on its own index with semdup fields: the service's figures
                from semdup.evaluation.through_reranker import semeval_predictions

                preds, threshold = semeval_predictions(client, sem, method.path, mode, variant, k,
                                                       keep_index=keep_index, progress=progress)
            else:
                preds, threshold = _scorer_predictions(client, index, sem, method, mode, variant, k, progress)
            runs.append(SemEvalRun(method.name, mode, semeval_scores(preds, gold), preds, threshold))
    finally:
        if index is not None and not keep_index:
            delete_index(client, index)
    return runs
