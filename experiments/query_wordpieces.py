"""The query's wordpiece limit, chosen on dev: quality through the reranker beside the query encoding's cost.

For each limit (None = the bundle's own, its tokenizer's max_len), on dev only:

* Travel dev: MAP / MRR of the service's default reranker call (BM25 ∪ k-NN where the index maps the vector,
  the bundle's fusion, top 100) over the Travel posts indexed with ``index_batch``;
* SemEval 2016 dev: the official MAP of each question's 10 candidates ranked by the reranker (``restrict_ids``);
* the query encoding's median ms over the Travel dev queries (the limits alternating query by query).

    python -m experiments.query_wordpieces --travel-bundle B1 --semeval-bundle B2 [--opensearch URL --index I]

A limit becomes the default only where neither dev figure drops (the delta is printed beside the speed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from typing import Any

import numpy as np


def _limits(text: str) -> list[int | None]:
    return [None if x == "none" else int(x) for x in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--travel-bundle", required=True)
    ap.add_argument("--semeval-bundle", required=True)
    ap.add_argument("--opensearch", required=True, help="OpenSearch URL (a throwaway node: indices are created)")
    ap.add_argument("--index", default=None, help="an existing index of the Travel posts with the travel bundle")
    ap.add_argument("--limits", default="none,192,128,96,64")
    args = ap.parse_args(argv)

    from opensearchpy import OpenSearch

    from semdup.bundle.bundle import Bundle
    from semdup.data import load_semeval_xml
    from semdup.data.paths import semeval_files, travel_dir
    from semdup.data.stackexchange import load_stackexchange_dump
    from semdup.evaluation.through_reranker import semantic_index
    from semdup.index_format.schema import CandidateFields
    from semdup.measures.ranking import complete_scores, retrieval_scores, semeval_scores
    from semdup.reranker import Reranker, RerankerSettings

    client = OpenSearch(args.opensearch, timeout=120)
    limits = _limits(args.limits)
    out: dict[str, Any] = {"limits": [str(x) for x in limits], "load_average_start": os.getloadavg()[0]}

    bundle = Bundle.load(args.travel_bundle, intra_op_threads=1)
    dump = load_stackexchange_dump(travel_dir())
    queries = list(dump.queries("dev"))
    relevant = {q.post.id: set(q.relevant) for q in queries}
    built = (
        contextlib.nullcontext(args.index)
        if args.index
        else semantic_index(
            client, bundle, dump.corpus(), "wp-travel", progress=False, search=CandidateFields(False, True)
        )
    )
    encode_ms: dict[str, list[float]] = {str(x): [] for x in limits}
    with built as index:
        for limit in limits:
            rr = Reranker(bundle, client, index, RerankerSettings(k_candidates=100, search_timeout=60))
            rr.encoder.max_wordpieces = limit
            ranked = {q.post.id: [c.id for c in rr.rank(q.post, k=100, exclude_id=q.post.id)] for q in queries}
            m = retrieval_scores(ranked, relevant, cutoff=100)
            out.setdefault("travel_dev", {})[str(limit)] = {k: round(float(v), 2) for k, v in m.items()}
        for i, q in enumerate(queries):  # the encoding alone, limits alternating (the order turning per query)
            for limit in limits[i % len(limits) :] + limits[: i % len(limits)]:
                t0 = time.perf_counter()
                bundle.encode_query(q.post, max_wordpieces=limit)
                encode_ms[str(limit)].append((time.perf_counter() - t0) * 1000)
    out["travel_dev_encode_ms"] = {
        k: {"p50": round(float(np.median(v)), 2), "p99": round(float(np.percentile(v, 99)), 2)}
        for k, v in encode_ms.items()
    }

    sem_bundle = Bundle.load(args.semeval_bundle, intra_op_threads=1)
    sem = load_semeval_xml(*semeval_files("dev"), name="dev")
    gold = sem.gold()
    with semantic_index(client, sem_bundle, sem.related_posts(), "wp-semeval", progress=False) as index:
        for limit in limits:
            rr = Reranker(sem_bundle, client, index, RerankerSettings(k_candidates=10, knn=False, search_timeout=60))
            rr.encoder.max_wordpieces = limit
            preds = {}
            for q in sem.questions:
                ids = [r.post.id for r in q.related]
                got = {c.id: c.score for c in rr.rank(q.post, k=len(ids), restrict_ids=ids)}
                preds[q.post.id] = complete_scores(got, ids)
            scores = semeval_scores(preds, gold)
            out.setdefault("semeval_dev", {})[str(limit)] = {k: round(float(v), 2) for k, v in scores.items()}
    out["load_average_end"] = os.getloadavg()[0]
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
