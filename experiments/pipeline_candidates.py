"""How a search pipeline gets semdup's candidates (issue #32, item 2), measured on Travel dev, through real pipelines.

The site's plain ``_search`` finds a post's duplicates among BM25's hits only; semdup's reranker searches BM25 ∪ k-NN
(100 each). Three ways for a pipeline, each run over every Travel dev query as the site would send it (``match`` on
the title, ``match`` on the body, the query post itself left out by ``must_not``), ``size`` 100, official
measures (MAP / MRR / Acc@k over the top 100, :func:`semdup.measures.ranking.retrieval_scores`):

* ``site BM25``: no pipeline (what the site has today);
* ``rerank processor``: neural-search's ``rerank`` response processor (``ml_opensearch``) over the site's 100 BM25
  hits, scored by semdup's ``/v1/rerank/documents`` (Cohere's shape, ``documents_are: ids``, the hits'
  ``post_id``): semdup's fusion, but only on BM25's candidates. Its query text is one string
  (``ext.rerank.query_context``, which the site's application must add): the title, or title and body joined;
* ``request rewrite``: semdup's pipeline (``semdup pipeline create``): the ``ml_inference`` request processor
  sends the search to ``/v1/search/rewrite``, semdup ranks BM25 ∪ k-NN, the site's search runs semdup's query.

Beside them, ``/v1/rerank`` itself (the service path the README's table measures). Needs a node with ml-commons
holding the Travel posts indexed by semdup (``semdup opensearch start --ml``, then ``semdup index-posts`` or the
demo's indexing) and a ``semdup serve`` of that index::

    SEMDUP_API_KEY=<search key> python -m experiments.pipeline_candidates --opensearch http://127.0.0.1:9260 \
        --index travel --service-url http://127.0.0.1:8080 [--split dev]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import httpx

_ML = "/_plugins/_ml"


def _site_search(post: Any, size: int) -> dict[str, Any]:
    return {"size": size, "_source": False, "query": {"bool": {
        "should": [{"match": {"title": post.title}}, {"match": {"body": post.body}}],
        "must_not": [{"ids": {"values": [post.id]}}]}}}


def _rerank_processor(client: Any, index: str, service_url: str, key: str) -> str:
    """A Cohere-shaped connector to /v1/rerank/documents (ids), its model, and a pipeline with neural-search's
    ``rerank`` response processor over the hits' ``post_id``; the pipeline's name."""
    from semdup.search_pipeline.cluster_settings import apply_settings, needed_settings
    from semdup.search_pipeline.setup import _call, _wait_task

    apply_settings(client, needed_settings(client, service_url))
    body = ('{"query": "${parameters.query}", "documents": ${parameters.documents}, "top_n": ${parameters.top_n}, '
            f'"documents_are": "ids", "index": {json.dumps(index)}}}')
    connector = _call(client, "POST", f"{_ML}/connectors/_create", {
        "name": "semdup-experiment-rerank", "description": "semdup /v1/rerank/documents (experiment)", "version": 1,
        "protocol": "http", "credential": {"key": key},
        "client_config": {"connection_timeout": 30, "read_timeout": 30, "max_retry_times": 0},
        "actions": [{"action_type": "predict", "method": "POST", "url": service_url.rstrip("/") + "/v1/rerank/documents",
                     "headers": {"Authorization": "Bearer ${credential.key}", "Content-Type": "application/json"},
                     "request_body": body, "pre_process_function": "connector.pre_process.cohere.rerank",
                     "post_process_function": "connector.post_process.cohere.rerank"}]})["connector_id"]
    made = _call(client, "POST", f"{_ML}/models/_register", {"name": "semdup-experiment-rerank",
                                                              "function_name": "remote", "connector_id": connector})
    model = made.get("model_id") or _wait_task(client, made["task_id"], "register")["model_id"]
    task = _call(client, "POST", f"{_ML}/models/{model}/_deploy")
    if task.get("task_id"):
        _wait_task(client, task["task_id"], "deploy")
    _call(client, "PUT", "/_search/pipeline/semdup-experiment-rerank", {"response_processors": [{"rerank": {
        "ml_opensearch": {"model_id": model}, "context": {"document_fields": ["post_id"]}}}]})
    return "semdup-experiment-rerank"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--opensearch", required=True)
    ap.add_argument("--index", default="travel")
    ap.add_argument("--service-url", required=True)
    ap.add_argument("--split", default="dev", choices=("dev", "test"))
    ap.add_argument("--size", type=int, default=100)
    args = ap.parse_args(argv)
    from semdup.core.settings import OpenSearchSettings
    from semdup.data.paths import travel_dir
    from semdup.data.stackexchange import load_stackexchange_dump
    from semdup.measures.ranking import retrieval_scores
    from semdup.opensearch_io.clients import connect
    from semdup.search_pipeline import PipelineSpec, create, remove

    key = os.environ["SEMDUP_API_KEY"]
    client = connect(OpenSearchSettings(url=args.opensearch, timeout=120))
    queries = load_stackexchange_dump(travel_dir()).queries(args.split)
    spec = PipelineSpec(index=args.index, service_url=args.service_url, timeout=30, name="semdup-experiment-rewrite")
    rewrite = create(client, spec, key).name
    rerank = _rerank_processor(client, args.index, args.service_url, key)
    http = httpx.Client(timeout=60, headers={"X-API-Key": key})

    def search(post: Any, **params: Any) -> list[str]:
        body = _site_search(post, args.size)
        if "text" in params:  # the rerank processor reads each hit's post_id from its _source
            body["_source"] = ["post_id"]
            body["ext"] = {"rerank": {"query_context": {"query_text": params.pop("text")}}}
        return [h["_id"] for h in client.search(index=args.index, body=body, params=params)["hits"]["hits"]]

    ways = {
        "site BM25": lambda p: search(p, search_pipeline="_none"),
        "rerank processor, query = title": lambda p: search(p, search_pipeline=rerank, text=p.title),
        "rerank processor, query = title + body": lambda p: search(p, search_pipeline=rerank,
                                                                   text=f"{p.title} {p.body}"[:20000]),
        "request rewrite (semdup pipeline)": lambda p: search(p, search_pipeline=rewrite),
        "/v1/rerank": lambda p: [c["id"] for c in http.post(f"{args.service_url}/v1/rerank", json={
            "title": p.title, "body": p.body, "k": args.size, "index": args.index,
            "exclude_id": p.id}).json()["candidates"]],
    }
    relevant = {q.post.id: set(q.relevant) for q in queries}
    try:
        for name, fn in ways.items():
            t0 = time.perf_counter()
            run = {q.post.id: fn(q.post) for q in queries}
            ms = (time.perf_counter() - t0) * 1000 / len(queries)
            m = retrieval_scores(run, relevant, cutoff=args.size)
            print(f"{name:42s} MAP {m['MAP']:.2f}  MRR {m['MRR']:.2f}  Acc@1 {m['Acc@1']:.2f}  "
                  f"Acc@10 {m['Acc@10']:.2f}  ({len(queries)} {args.split} queries, {ms:.0f} ms each)", flush=True)
    finally:
        remove(client, args.index, rewrite)
        remove(client, args.index, rerank)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
