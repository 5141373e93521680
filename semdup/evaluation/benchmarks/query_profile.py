"""One rerank query step by step, and the overlapped query path against the sequential one, in one run (not a test).

Over the Travel posts indexed with the bundle's semdup fields and a k-NN vector (``index_batch``), for real Travel
test queries, the default reranker call (BM25 ∪ k-NN, 100 candidates each, fusion, top 10), median ms per step:

* sequential (``Reranker.overlap = False``, the path before issue #19): encode the body, encode the title, one
  ``_msearch/template`` of BM25 and k-NN, a second one for the BM25 score of the k-NN-only candidates, fusion;
* overlapped (the default): the BM25 search on a pool thread and the title's encoding on another while the body
  is encoded, then the k-NN search whose hits carry their BM25 score (a named query), fusion.

Then both calls alternate query by query (the order flipping each round): p50 / p99 of each, their ratio, whether
their rankings are equal, and the load average. The machine is shared: only the ratios of one run mean anything.

    python -m semdup.evaluation.benchmarks.query_profile --bundle artifacts/demo/default-minilm-travel
    python -m semdup.evaluation.benchmarks.query_profile --bundle B --opensearch URL --index I  # an existing index
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


def _sequential_steps(rr: Any, post: Any) -> dict[str, float]:
    """The sequential call's steps, each timed (what ``rank`` did before the overlap)."""
    from semdup.reranker.candidates import lexical_scores_for
    from semdup.reranker.path_search import search_candidates
    from semdup.search_templates import query_text

    s, name = rr.settings, rr.target()
    text = query_text(post.title, post.body)
    steps: dict[str, float] = {}
    steps["encode body"], (vector, terms) = _ms(lambda: rr.bundle.encode_query(post))
    steps["encode title"], titles = _ms(lambda: rr.bundle.encode_titles([post]))
    steps["BM25 + k-NN _msearch"], cands = _ms(
        lambda: search_candidates(
            rr.client, name, text, templates=s.templates, variant=s.variant, size=s.k_candidates,
            timeout=s.search_timeout, exclude_id=post.id, knn_vector=vector, query_template=rr._query_template or None,
        )
    )  # fmt: skip
    unscored = [i for i in cands.ids if i not in cands.lexical]
    steps["BM25 of k-NN-only (2nd request)"], more = _ms(
        lambda: lexical_scores_for(
            rr.client, name, text, unscored, model=s.templates[0], variant=s.variant, timeout=s.search_timeout
        )
    )
    cands.lexical.update(more)
    from semdup.reranker.reranker import QueryEncoding

    ids = [i for i in cands.ids if i in cands.fields]
    steps["fusion"], _ = _ms(
        lambda: rr._score(
            ids,
            [cands.fields[i] for i in ids],
            [cands.lexical.get(i, 0.0) for i in ids],
            QueryEncoding(vector, terms, titles[0]),
            cands.sources,
            10,
        )
    )
    return steps


def _overlapped_steps(rr: Any, post: Any) -> dict[str, float]:
    """The overlapped call's pieces: each piece's own duration, and the wall clock of the encoding stage."""
    from semdup.reranker.path_search import merge_paths, search_paths
    from semdup.reranker.reranker import _searches
    from semdup.search_templates import query_text

    s, name = rr.settings, rr.target()
    text = query_text(post.title, post.body)
    common = {"variant": s.variant, "size": s.k_candidates, "timeout": s.search_timeout, "exclude_id": post.id}
    steps: dict[str, float] = {}
    t0 = time.perf_counter()
    lex = _searches().submit(lambda: _ms(lambda: search_paths(rr.client, name, text, templates=s.templates, **common)))
    title = _searches().submit(lambda: _ms(lambda: rr.bundle.encode_titles([post])))
    steps["encode body"], (vector, terms) = _ms(lambda: rr.bundle.encode_query(post))
    steps["encode title (beside)"], _ = title.result()
    steps["stage 1 wall (encodings | BM25)"] = (time.perf_counter() - t0) * 1000.0
    from semdup.reranker.reranker import QueryEncoding

    query = QueryEncoding(vector, terms, None)
    paths = rr._paths.get(rr.index)
    steps["k-NN _msearch + named BM25"], vec = _ms(
        lambda: rr._vector_paths(name, text, query, paths, rr._query_template or None, common)
    )
    steps["BM25 _msearch (beside)"], lexical = lex.result()
    steps["stage 1+2 wall"] = (time.perf_counter() - t0) * 1000.0
    steps["merge"], _ = _ms(lambda: merge_paths([lexical, vec], primary=s.templates[0]))
    return steps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--bundle", required=True, help="a base-encoder bundle with a title term (the MiniLM default)")
    ap.add_argument("--opensearch", default=None, help="an OpenSearch URL (default: a throwaway node)")
    ap.add_argument("--index", default=None, help="an index of the Travel posts with k-NN (with --opensearch)")
    ap.add_argument("--queries", type=int, default=100, help="Travel test queries")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--onnx-threads", type=int, default=1, help="as `semdup serve` runs each request")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("opensearch").setLevel(logging.ERROR)

    from opensearchpy import OpenSearch

    from semdup.bundle.bundle import Bundle
    from semdup.data.paths import travel_dir
    from semdup.data.stackexchange import load_stackexchange_dump
    from semdup.evaluation.through_reranker import semantic_index
    from semdup.index_format.schema import CandidateFields
    from semdup.reranker import Reranker, RerankerSettings

    bundle = Bundle.load(args.bundle, providers=["CPUExecutionProvider"], intra_op_threads=args.onnx_threads)
    dump = load_stackexchange_dump(travel_dir())
    queries = [q.post for q in dump.queries("test")][: args.queries]
    loads = {"start": os.getloadavg()[0]}
    with _cluster(args.opensearch) as url:
        client = OpenSearch(url, timeout=60, pool_maxsize=8)
        built = (
            contextlib.nullcontext(args.index)
            if args.index
            else semantic_index(
                client, bundle, dump.corpus(), "profile", progress=True, search=CandidateFields(False, True)
            )
        )
        with built as index:
            rr = Reranker(bundle, client, index, RerankerSettings(k_candidates=100, search_timeout=30))
            seq = rr.with_settings()
            seq.overlap = False
            for p in queries[: args.warmup]:
                rr.rank(p, k=10, exclude_id=p.id)
                seq.rank(p, k=10, exclude_id=p.id)
            loads["indexed"] = os.getloadavg()[0]
            profile: dict[str, dict[str, list[float]]] = {"sequential": {}, "overlapped": {}}
            for p in queries:
                for name, fn in (("sequential", _sequential_steps), ("overlapped", _overlapped_steps)):
                    for step, ms in fn(rr, p).items():
                        profile[name].setdefault(step, []).append(ms)
            loads["profiled"] = os.getloadavg()[0]
            calls = {"sequential": seq, "overlapped": rr}
            ms: dict[str, list[float]] = {n: [] for n in calls}
            equal = 0
            for r in range(args.rounds):
                for i, p in enumerate(queries):
                    order = list(calls) if (i + r) % 2 == 0 else list(reversed(calls))
                    got = {}
                    for n in order:
                        ms_n, got[n] = _ms(lambda n=n, p=p: calls[n].rank(p, k=10, exclude_id=p.id))
                        ms[n].append(ms_n)
                    equal += [c.to_json() for c in got["sequential"]] == [c.to_json() for c in got["overlapped"]]
            loads["timed"] = os.getloadavg()[0]
    report = {
        "bundle": bundle.version,
        "queries": len(queries),
        "rounds": args.rounds,
        "onnx_threads": args.onnx_threads,
        "profile_median_ms": {
            n: {step: round(float(np.median(v)), 2) for step, v in steps.items()} for n, steps in profile.items()
        },
        "rank_ms": {
            n: {"p50": round(float(np.percentile(v, 50)), 2), "p99": round(float(np.percentile(v, 99)), 2)}
            for n, v in ms.items()
        },
        "equal_rankings": f"{equal}/{len(queries) * args.rounds}",
        "load_average": {k: round(v, 2) for k, v in loads.items()},
    }
    report["ratio_overlapped_to_sequential"] = {
        q: round(report["rank_ms"]["overlapped"][q] / report["rank_ms"]["sequential"][q], 3) for q in ("p50", "p99")
    }
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"bundle {report['bundle']}; {len(queries)} Travel test queries x {args.rounds} rounds; onnx threads "
          f"{args.onnx_threads}; load average {report['load_average']}")  # fmt: skip
    for name, steps in report["profile_median_ms"].items():
        print(f"{name} (median ms per step):")
        for step, v in steps.items():
            print(f"  {step:34s} {v:8.2f}")
    for name, q in report["rank_ms"].items():
        print(f"rank {name:11s} p50 {q['p50']:7.2f} ms  p99 {q['p99']:7.2f} ms")
    ratio = report["ratio_overlapped_to_sequential"]
    print(f"overlapped / sequential: p50 {ratio['p50']:.3f}, p99 {ratio['p99']:.3f}; "
          f"equal rankings {report['equal_rankings']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
