"""Where the one-hop pipeline's time goes, step by step, in this process (a benchmark, not a test).

The Travel posts indexed with a bundle (BM25 ∪ k-NN, one shard, ``index_batch``), then for ``--queries`` Travel test
queries, twice (the first round warms, the second is reported), one after the other: ``Reranker.rank`` (what
``/v1/rerank`` runs), the query's encoding alone, :func:`semdup.reranker.onehop.rewrite` (the encoding with BM25's
top 100 searched beside it: what the service does for the pipeline) and the node's run of its answer (``took`` and
the call's wall time), with how many posts the answer's candidate lists match; then the same query without the
fused script (what k-NN and the match cost alone). No ml-commons, no HTTP: the pipeline's connector hop is what the
peer benchmark adds on top.

    python -m benchmarks.onehop_profile --bundle artifacts/demo/default-minilm-travel
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any


def _ms(t0: float) -> float:
    return 1000.0 * (time.perf_counter() - t0)


def profile(rr: Any, index: str, queries: list[Any]) -> dict[str, Any]:
    """The median of each step over ``queries`` (the second of two rounds), and the index's segment count."""
    from benchmarks.neural_search_peer import site_search
    from semdup.reranker import onehop
    from semdup.reranker.rewrite import post_of_search

    resolved = rr.indices.resolve(index, rr.settings)
    rows: dict[str, list[float]] = {k: [] for k in ("rank", "encode", "rewrite", "node took", "node wall",
                                                    "matched", "node took without the script")}  # fmt: skip
    for warm in (True, False):
        for q in queries:
            search = site_search(q.post, 10)
            t0 = time.perf_counter()
            rr.rank(q.post, k=10, exclude_id=q.post.id)
            ranked = _ms(t0)
            t0 = time.perf_counter()
            rr.encoder.encode_post(q.post)
            encoded = _ms(t0)
            t0 = time.perf_counter()
            answer = onehop.rewrite(rr, search, post_of_search(search, *resolved.text_fields), resolved, index)
            rewritten = _ms(t0)
            t0 = time.perf_counter()
            got = rr.client.search(index=index, body={**search, "query": answer.query})
            wall = _ms(t0)
            every = rr.client.search(index=index, body={**search, "query": answer.query, "size": 10_000,
                                                        "track_total_hits": True})  # fmt: skip
            inner = answer.query["bool"]["should"][0]["bool"]["must"][0]["script_score"]["query"]
            bare = rr.client.search(index=index, body={**search, "query": inner})
            if not warm:
                for key, value in (("rank", ranked), ("encode", encoded), ("rewrite", rewritten),
                                   ("node took", got["took"]), ("node wall", wall),
                                   ("matched", every["hits"]["total"]["value"]),
                                   ("node took without the script", bare["took"])):  # fmt: skip
                    rows[key].append(float(value))
    segments = rr.client.indices.segments(index=index)["indices"][index]["shards"]["0"][0]["num_search_segments"]
    return {"queries": len(queries), "segments": segments,
            "median ms (matched: posts)": {k: round(statistics.median(v), 1) for k, v in rows.items()}}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--bundle", required=True, help="a bundle with a dense encoder (the Travel default)")
    ap.add_argument("--queries", type=int, default=60, help="Travel test queries (default 60)")
    ap.add_argument("--opensearch", default=None, help="an OpenSearch URL with k-NN (default: a throwaway node)")
    args = ap.parse_args(argv)
    from semdup.bundle.bundle import Bundle
    from semdup.core.settings import OpenSearchSettings
    from semdup.data.paths import travel_dir
    from semdup.data.stackexchange import load_stackexchange_dump
    from semdup.devstack.local_opensearch import own_opensearch
    from semdup.evaluation.through_reranker import semantic_index
    from semdup.index_format.schema import CandidateFields
    from semdup.opensearch_io.clients import connect
    from semdup.reranker import Reranker, RerankerSettings

    dump = load_stackexchange_dump(travel_dir())
    bundle = Bundle.load(args.bundle)
    with own_opensearch(args.opensearch, name="onehop-profile") as url:
        client = connect(OpenSearchSettings(url=url, timeout=60), check=False)
        with semantic_index(client, bundle, dump.corpus(), "onehop-profile", progress=False, batch=256,
                            search=CandidateFields(False, True)) as index:  # fmt: skip
            rr = Reranker(bundle, client, index, RerankerSettings(knn=True, search_timeout=30))
            result = profile(rr, index, dump.queries("test")[: args.queries])
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
