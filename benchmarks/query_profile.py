"""One rerank query step by step, and the whole call with its query encoded on 1 and on 2 threads, in one run.

Over the Travel posts indexed with the bundle's semdup fields and a k-NN vector (``index_batch``), for real Travel
test queries, the default reranker call (BM25 ∪ k-NN, 100 candidates each, fusion, top 10):

* its steps one after the other, each timed (median ms): the encoding of the body and of the title, the one
  ``_msearch`` of every source (hits carrying the cluster's fusion components, the k-NN hits their BM25
  score by a rescore), the merge and the fusion; beside them the call itself (``Reranker.rank``);
* the call with the bundle's onnxruntime session on each of ``--onnx-threads`` (default 1,2: the service's query
  encoder before and after issue #28's thread policy), alternating query by query (the order turning each round):
  p50 / p99 of each, their ratio to the first, whether their rankings are equal (to the bit), and the load
  average. The machine is shared: only the ratios of one run mean anything.

    python -m benchmarks.query_profile --bundle artifacts/demo/default-minilm-travel
    python -m benchmarks.query_profile --bundle B --opensearch URL --index I  # an existing index
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)


def _ms(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1000.0, out


@contextlib.contextmanager
def _cluster(url: str | None) -> Iterator[str]:
    """``url``, or a throwaway node in a temporary folder (stopped and removed at the end)."""
    if url:
        yield url
        return
    from semdup.devstack.local_opensearch import LocalOpenSearch
    from semdup.devstack.local_process import any_free_port

    workdir = Path(tempfile.mkdtemp(prefix="semdup-query-profile-"))
    workdir.chmod(0o711)  # the node runs as an unprivileged account when we are root
    node = LocalOpenSearch(state_dir=workdir / "node", port=any_free_port())
    try:
        yield node.start()
    finally:
        node.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _steps(rr: Any, post: Any) -> dict[str, float]:
    """The call's steps one after the other, each timed, through the reranker's own pieces."""
    from semdup.index_format.schema import lexical_field
    from semdup.reranker.fusion import compute_fused, merge_components
    from semdup.reranker.sources import SourceQuery, merge, search
    from semdup.search_templates import query_text
    from semdup.search_templates.components import components_params

    s = rr.settings
    resolved = rr.indices.resolve(rr.index, s)
    steps: dict[str, float] = {}
    steps["encode body"], (vector, terms) = _ms(lambda: rr.bundle.encode_query(post))
    steps["encode title"], titles = _ms(lambda: rr.bundle.encode_titles([post]))
    query = SourceQuery(query_text(post.title, post.body), s.k_candidates, post.id, vector=vector, terms=terms,
                        components=components_params(rr.version, vector, terms, titles[0]),
                        lexical_field=lexical_field(s.templates[0], s.variant), shards=resolved.shards)  # fmt: skip
    steps["one _msearch"], found = _ms(
        lambda: search(rr.client, resolved.target, rr.sources(resolved), query, s.search_timeout)
    )
    steps["merge"], cands = _ms(lambda: merge(found, primary=s.templates[0]))
    ids = [i for i in cands.ids if i in cands.components]
    steps["fusion"], _ = _ms(
        lambda: compute_fused(
            merge_components(vector, terms, titles[0], [cands.components[i] for i in ids], {},
                             [cands.lexical.get(i, 0.0) for i in ids]),  # fmt: skip
            rr.fusion,
        )
    )
    steps["the call (rank)"], _ = _ms(lambda: rr.rank(post, k=10, exclude_id=post.id))
    return steps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--bundle", required=True, help="a base-encoder bundle with a title term (the MiniLM default)")
    ap.add_argument("--opensearch", default=None, help="an OpenSearch URL (default: a throwaway node)")
    ap.add_argument("--index", default=None, help="an index of the Travel posts with k-NN (with --opensearch)")
    ap.add_argument("--queries", type=int, default=100, help="Travel test queries")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--onnx-threads", default="1,2",
                    help="intra-op threads of the query encoder to compare, comma-separated (the first is the "
                         "baseline; the steps are timed with the last; `semdup serve` runs SEMDUP_ONNX_THREADS)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    threads = [int(t) for t in args.onnx_threads.split(",")]
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("opensearch").setLevel(logging.ERROR)

    from semdup.bundle.bundle import Bundle
    from semdup.core.settings import OpenSearchSettings
    from semdup.data.paths import travel_dir
    from semdup.data.stackexchange import load_stackexchange_dump
    from semdup.evaluation.through_reranker import semantic_index
    from semdup.index_format.schema import CandidateFields
    from semdup.opensearch_io.clients import connect
    from semdup.reranker import Reranker, RerankerSettings

    bundles = {t: Bundle.load(args.bundle, providers=["CPUExecutionProvider"], intra_op_threads=t) for t in threads}
    bundle = bundles[threads[-1]]
    dump = load_stackexchange_dump(travel_dir())
    queries = [q.post for q in dump.queries("test")][: args.queries]
    loads = {"start": os.getloadavg()[0]}
    with _cluster(args.opensearch) as url:
        client = connect(OpenSearchSettings(url=url, timeout=60), check=False, pool_maxsize=8)  # as the service
        built = (
            contextlib.nullcontext(args.index)
            if args.index
            else semantic_index(
                client, bundle, dump.corpus(), "profile", progress=True, search=CandidateFields(False, True)
            )
        )
        with built as index:
            settings = RerankerSettings(k_candidates=100, search_timeout=30)
            calls = {f"{t} thread(s)": Reranker(b, client, index, settings) for t, b in bundles.items()}
            rr = calls[f"{threads[-1]} thread(s)"]
            for p in queries[: args.warmup]:
                for c in calls.values():
                    c.rank(p, k=10, exclude_id=p.id)
            loads["indexed"] = os.getloadavg()[0]
            profile: dict[str, list[float]] = {}
            for p in queries:
                for step, ms in _steps(rr, p).items():
                    profile.setdefault(step, []).append(ms)
            loads["profiled"] = os.getloadavg()[0]
            ms: dict[str, list[float]] = {n: [] for n in calls}
            equal = 0
            for r in range(args.rounds):
                for i, p in enumerate(queries):
                    order = list(calls) if (i + r) % 2 == 0 else list(reversed(calls))
                    got = {}
                    for n in order:
                        ms_n, got[n] = _ms(lambda n=n, p=p: calls[n].rank(p, k=10, exclude_id=p.id))
                        ms[n].append(ms_n)
                    equal += len({json.dumps([c.to_json() for c in g]) for g in got.values()}) == 1
            loads["timed"] = os.getloadavg()[0]
    base = next(iter(calls))
    report = {
        "bundle": bundle.version,
        "queries": len(queries),
        "rounds": args.rounds,
        "onnx_threads": threads,
        "steps_median_ms": {step: round(float(np.median(v)), 2) for step, v in profile.items()},
        "rank_ms": {
            n: {"p50": round(float(np.percentile(v, 50)), 2), "p99": round(float(np.percentile(v, 99)), 2)}
            for n, v in ms.items()
        },
        "equal_rankings": f"{equal}/{len(queries) * args.rounds}",
        "load_average": {k: round(v, 2) for k, v in loads.items()},
    }
    report["ratio_to_first"] = {
        n: {q: round(v[q] / report["rank_ms"][base][q], 3) for q in ("p50", "p99")}
        for n, v in report["rank_ms"].items()
    }
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"bundle {report['bundle']}; {len(queries)} Travel test queries x {args.rounds} rounds; onnx threads "
          f"{threads}; load average {report['load_average']}")  # fmt: skip
    print(f"steps one after the other, {threads[-1]} thread(s) (median ms):")
    for step, v in report["steps_median_ms"].items():
        print(f"  {step:34s} {v:8.2f}")
    for name, q in report["rank_ms"].items():
        ratio = report["ratio_to_first"][name]
        print(f"rank, query encoded on {name:11s} p50 {q['p50']:7.2f} ms  p99 {q['p99']:7.2f} ms  "
              f"(÷ {base}: p50 {ratio['p50']:.3f}, p99 {ratio['p99']:.3f})")
    print(f"equal rankings {report['equal_rankings']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
