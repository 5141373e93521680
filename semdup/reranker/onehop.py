"""The one-hop rewrite: a site's ``_search`` answered with one query the node runs, semdup's fusion inside it.

The candidate rewrite (:func:`semdup.reranker.rewrite.ranked_query`) ranks in semdup: it encodes the post, runs
its own ``_msearch`` (BM25, k-NN, the cosines), and answers ~200 scored ids, which the node then searches: three
trips, and the site's filters only prune those ids. This one answers the query that ranks in the cluster::

    semdup: encode the post  ─┐  (at the same time) the lexical template's top k within the site's filter:
                              │  its ids and its best score
    answer: script_score(bool{ should: match(the template's text)          → _score = the lexical score
                               filter: ids(those k) OR knn(vector, k, the site's filter inside)
                                       + the site's restriction skeleton }, the stored fused script)

The node runs it as the site's search: BM25 ∪ k-NN are found *within* the site's filter (k-NN's efficient
filtering), so a filtered search fills its page; the fused script (:data:`~semdup.search_templates.components.
FUSED_SCRIPT`) computes the same cosines as the candidate path, from each candidate's packed value, and the
fusion with lexnorm = the lexical score / the best lexical score within the filter. That equals today's min-max
whenever a candidate matches no query term (its minimum is then 0) and elsewhere moved dev MAP by 0.01 or less
(docs/results.md, "One hop"). ``from`` + ``size`` beyond ``k_candidates`` widens both candidate lists to
``from`` + ``size`` (at most :data:`MAX_DEPTH`, OpenSearch's own ``index.max_result_window``), so pages go on as
the site's own pages do.

What it needs: the searched index is semdup's own (its posts carry ``semdup.packed`` and ``semdup.vector``) and
the bundle has a dense encoder, and the cluster holds the fused script. A site's index connected with ``semdup
enable`` keeps its vectors in a companion the site's search never reaches, so it keeps the candidate rewrite
(:func:`serves`, :func:`script_ready`).

On an index of several primary shards the node scores the lexical template with each shard's term statistics
(the site's ``search_type`` decides; the processor cannot change it), and so does the top-k search here, so
lexnorm divides like by like; ``/v1/rerank`` asks for the index's statistics (``dfs_query_then_fetch``).
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson

from semdup.core.errors import SemdupError
from semdup.core.posts import Post
from semdup.index_format.schema import lexical_field
from semdup.reranker.index import ResolvedIndex
from semdup.reranker.restriction import restriction
from semdup.reranker.rewrite import excluded_id, framed
from semdup.search_templates.components import FUSED_SCRIPT, FUSED_SCRIPT_ID, components_params, fused_params

__all__ = ["MAX_DEPTH", "OneHop", "depth_of", "onehop_query", "rewrite", "script_ready", "serves"]

MAX_DEPTH = 10_000  # index.max_result_window's default: OpenSearch refuses deeper pages itself
# the lexical top-k searches, each beside its query's encoding
_LEXICAL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="semdup-onehop")


@dataclass(frozen=True)
class OneHop:
    """One rewrite's answer: the query, and what it holds.

    Attributes:
        query: the site's new query (module doc).
        lexical: how many ids the lexical template's top k gave (within the site's filter).
        best: the best lexical score within the filter (lexnorm's divisor; 0: nothing matched a term).
        k: the candidates asked of each path (``k_candidates``, or ``from`` + ``size`` when deeper).
    """

    query: dict[str, Any]
    lexical: int
    best: float
    k: int


def serves(resolved: ResolvedIndex, dense: bool) -> bool:
    """Whether the one-hop query can rank ``resolved``: semdup's own index with k-NN, a bundle with a dense encoder."""
    return dense and not resolved.companion and resolved.fields.knn


def script_ready(client: Any, timeout: float) -> bool:
    """Whether the cluster holds the fused script as this version wrote it (the index's creation and the
    reranker's first search store it where the user may): without it the node would fail the site's search
    itself, after the pipeline's fallback could act, so the service answers the candidate query instead."""
    try:
        found = client.get_script(id=FUSED_SCRIPT_ID, params={"request_timeout": timeout})
    except SemdupError:  # absent (404), or not allowed to read scripts
        return False
    return (found.get("script") or {}).get("source") == FUSED_SCRIPT


def depth_of(search: Mapping[str, Any], k_candidates: int) -> int:
    """The candidates each path finds: ``k_candidates``, or the site's ``from`` + ``size`` where that is deeper."""
    try:
        deepest = int(search.get("from") or 0) + int(search.get("size") if search.get("size") is not None else 10)
    except (TypeError, ValueError):
        deepest = 0
    return max(k_candidates, min(max(deepest, 0), MAX_DEPTH))


def _filters(skeleton: dict[str, Any] | None, exclude: str | None) -> dict[str, Any]:
    """The ``bool`` clauses that keep a search within the site's restriction and without the excluded post."""
    out: dict[str, Any] = {}
    if skeleton is not None:
        out["filter"] = [skeleton]
    if exclude is not None:
        out["must_not"] = [{"ids": {"values": [exclude]}}]
    return out


def _lexical_top(client: Any, index: str, match: dict[str, Any], within: dict[str, Any], k: int,
                 timeout: float) -> tuple[list[str], float]:  # fmt: skip
    """The lexical template's top ``k`` within the site's filter: their ids, and the best score (0.0: none)."""
    body = {"size": k, "_source": False, "track_total_hits": False,
            "query": {"bool": {"must": [match], **within}}}  # fmt: skip
    hits = client.search(index=index, body=body, params={"request_timeout": timeout})["hits"]["hits"]
    return [str(h["_id"]) for h in hits], max((float(h["_score"]) for h in hits), default=0.0)


def onehop_query(
    search: Mapping[str, Any],
    *,
    within: dict[str, Any],
    match: dict[str, Any],
    lexical_ids: list[str],
    vector: Any,
    script_params: dict[str, Any],
    index: str | None,
    k: int,
) -> dict[str, Any]:
    """The one-hop query (module doc) from its parts: ``within`` the ``bool`` clauses of the site's restriction and
    exclusion (:func:`_filters`), ``match`` the lexical template's scoring clause and ``lexical_ids`` its top k
    within them, the query's dense ``vector``, and the fused script's parameters
    (:func:`~semdup.search_templates.components.fused_params`, with the best lexical score)."""
    # no ``method_parameters``: ml-commons hands the node every number of semdup's answer as a double, and k-NN
    # refuses an ``ef_search`` of 200.0 (``k`` and the script's parameters read doubles as they should)
    knn: dict[str, Any] = {"vector": vector, "k": k}
    if within:
        knn["filter"] = {"bool": within}
    found = [{"knn": {"semdup.vector": knn}}]
    if lexical_ids:
        found.insert(0, {"ids": {"values": lexical_ids}})
    inner = {"bool": {
        "should": [match],
        "filter": [{"bool": {"should": found, "minimum_should_match": "1"}}, *within.get("filter", [])],
        **({"must_not": within["must_not"]} if "must_not" in within else {}),
    }}  # fmt: skip
    ranking = {"script_score": {"query": inner, "script": {"id": FUSED_SCRIPT_ID, "params": script_params}}}
    return framed(search, ranking, index)


def rewrite(reranker: Any, search: Mapping[str, Any], post: Post, resolved: ResolvedIndex, index: str) -> OneHop:
    """The one-hop answer to a site's search of ``index`` for ``post`` (module doc): the post's encoding and the
    lexical top k run at the same time (unless the lexical text is cut by the encoding's term weights,
    ``lexical_terms``), then the query is built; nothing else is asked of the cluster.

    Raises:
        OpenSearchUnavailable / SearchTimeout / OpenSearchRefused: the top-k search (the boundary's errors).
        PostError: a malformed or too deeply nested site query.
    """
    s = reranker.settings
    k = depth_of(search, s.k_candidates)
    skeleton = restriction(search.get("query"), resolved.text_fields)
    within = _filters(skeleton, excluded_id(search))

    def lexical(text: str) -> Any:
        match = {"match": {lexical_field(s.templates[0], s.variant): {"query": text}}}
        return match, _LEXICAL.submit(_lexical_top, reranker.client, resolved.target, match, within, k,
                                      s.search_timeout)  # fmt: skip

    early = None if s.lexical_terms else lexical(reranker.lexical_text(post, None))
    encoding = reranker.encoder.encode_post(post)
    match, pending = early if early is not None else lexical(reranker.lexical_text(post, encoding))
    ids, best = pending.result()
    params = fused_params(components_params(reranker.version, encoding.vector, encoding.terms, encoding.title),
                          reranker.fusion, best)  # fmt: skip
    query = onehop_query(search, within=within, match=match, lexical_ids=ids, vector=params["qv"],
                         script_params=params, index=index, k=k)  # fmt: skip
    return OneHop(_plain(query), len(ids), best, k)


def _plain(query: dict[str, Any]) -> dict[str, Any]:
    """``query`` in JSON's own types: each float32 of a vector as its shortest decimal (the node parses back the
    same float32 values, about half the bytes of their float64 decimals), term ids and weights as lists."""
    return orjson.loads(orjson.dumps(query, option=orjson.OPT_SERIALIZE_NUMPY))
