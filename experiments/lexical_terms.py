"""How many of the query's terms the lexical templates need (issue #36): dev MAP and the ``_msearch`` per cut.

The reranker's lexical candidates (and the BM25 score the fusion's lexnorm reads) come from a ``match`` on the
query's text; the cluster pays for each of its terms, twice (the BM25 search and the k-NN hits' rescore).
``RerankerSettings.lexical_terms`` keeps the N heaviest by the bundle's bag-of-words weights. This runs the
service's own reranker (BM25 ∪ k-NN, 100 each, as the demo's figures) over dev for each N, on a throwaway node:

* Travel dev (the demo's Travel default): MAP, Acc@1 and the ``_msearch``'s median ms (cuts interleaved query by
  query, so the machine's load falls on every cut alike);
* SemEval-2016 dev (the demo's SemEval default, each question's ten candidates): official MAP.

AskUbuntu's pairs are not run: each pair's candidate is ranked alone, so lexnorm is 0 and no cut changes a score.
The choice rule: the smallest N whose MAP stays within 0.2 of the whole text (N = 0) on every dev set.

    python -m experiments.lexical_terms --travel artifacts/demo/default-minilm-travel \
        --semeval artifacts/demo/default-minilm-semeval [--cuts 0,64,48,32,24]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np


def _travel(client: Any, bundle_path: str, cuts: list[int]) -> dict[int, dict[str, float]]:
    from semdup.bundle.bundle import Bundle
    from semdup.data.paths import travel_dir
    from semdup.data.stackexchange import load_stackexchange_dump
    from semdup.evaluation.through_reranker import semantic_index
    from semdup.index_format.schema import CandidateFields
    from semdup.measures.ranking import retrieval_scores
    from semdup.reranker import Reranker, RerankerSettings
    import semdup.reranker.reranker as reranker_module

    dump = load_stackexchange_dump(travel_dir())
    queries = dump.queries("dev")
    relevant = {q.post.id: set(q.relevant) for q in queries}
    bundle = Bundle.load(bundle_path)
    timed: list[float] = []
    search = reranker_module.search

    def timed_search(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return search(*args, **kwargs)
        finally:
            timed.append((time.perf_counter() - t0) * 1000)

    reranker_module.search = timed_search
    with semantic_index(client, bundle, dump.corpus(), "lexical-terms", progress=False,
                        search=CandidateFields(False, True)) as index:  # fmt: skip
        rerankers = {n: Reranker(bundle, client, index, RerankerSettings(knn=True, lexical_terms=n, search_timeout=30))
                     for n in cuts}  # fmt: skip
        for q in queries[:10]:  # warm up
            for rr in rerankers.values():
                rr.rank(q.post, k=100, exclude_id=q.post.id)
        ranked: dict[int, dict[str, list[str]]] = {n: {} for n in cuts}
        ms: dict[int, list[float]] = {n: [] for n in cuts}
        for i, q in enumerate(queries):
            order = cuts if i % 2 == 0 else list(reversed(cuts))
            for n in order:
                timed.clear()
                ranked[n][q.post.id] = [c.id for c in rerankers[n].rank(q.post, k=100, exclude_id=q.post.id)]
                ms[n].append(timed[0])
    reranker_module.search = search
    out = {}
    for n in cuts:
        m = retrieval_scores(ranked[n], relevant, cutoff=100)
        out[n] = {"MAP": round(m["MAP"], 2), "Acc@1": round(m["Acc@1"], 2),
                  "msearch_p50_ms": round(float(np.median(ms[n])), 1)}  # fmt: skip
    return out


def _semeval(client: Any, bundle_path: str, cuts: list[int]) -> dict[int, dict[str, float]]:
    from semdup.bundle.bundle import Bundle
    from semdup.data.paths import semeval_files
    from semdup.data.semeval import load_semeval_xml
    from semdup.evaluation.through_reranker import semantic_index
    from semdup.measures.ranking import complete_scores, semeval_scores
    from semdup.reranker import Reranker, RerankerSettings

    sem = load_semeval_xml(*semeval_files("dev"), name="dev")
    bundle = Bundle.load(bundle_path)
    out = {}
    with semantic_index(client, bundle, sem.related_posts(), "lexical-terms-semeval", progress=False) as index:
        for n in cuts:
            rr = Reranker(bundle, client, index, RerankerSettings(k_candidates=10, knn=False, lexical_terms=n))
            preds = {}
            for q in sem.questions:
                ids = [r.post.id for r in q.related]
                ranked = {c.id: c.score for c in rr.rank(q.post, k=len(ids), restrict_ids=ids)}
                preds[q.post.id] = complete_scores(ranked, ids)  # as `semdup eval semeval`
            out[n] = {"MAP": round(semeval_scores(preds, sem.gold())["MAP"], 2)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--travel", required=True, help="the Travel default bundle")
    ap.add_argument("--semeval", required=True, help="the SemEval default bundle")
    ap.add_argument("--cuts", default="0,64,48,32,24", help="values of lexical_terms (0: the whole text)")
    ap.add_argument("--opensearch", default=None, help="an OpenSearch URL with k-NN (default: a throwaway node)")
    args = ap.parse_args(argv)
    cuts = [int(c) for c in args.cuts.split(",")]
    from semdup.opensearch_io.clients import connect
    from semdup.core.settings import OpenSearchSettings
    from semdup.devstack.local_opensearch import own_opensearch

    with own_opensearch(args.opensearch, name="lexical-terms") as url:
        client = connect(OpenSearchSettings(url=url, timeout=60), check=False)
        result = {"travel dev": _travel(client, args.travel, cuts),
                  "semeval dev": _semeval(client, args.semeval, cuts)}
    print(json.dumps(result, indent=1))
    chosen = [n for n in sorted(c for c in cuts if c)
              if all(abs(r[n]["MAP"] - r[0]["MAP"]) <= 0.2 for r in result.values())]  # fmt: skip
    print(f"smallest cut within 0.2 MAP of the whole text on every dev set: {chosen[0] if chosen else 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
