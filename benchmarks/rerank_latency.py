"""Rerank call latency vs the plain BM25 template search alone, on this machine, in one run (not a test).

Over the same OpenSearch, the same index (the Travel Stack Exchange posts with the bundle's semdup fields,
written by ``index_batch``) and the same real query posts, interleaved query by query:

* bm25: one ``_msearch/template`` call of the stored BM25 template, top ``--k-candidates`` (what a plain
  lexical duplicate search costs);
* rerank: ``Reranker.rank`` with ``--k-candidates`` BM25 candidates: query encoding (onnxruntime), the same
  template search with each hit carrying its fusion components (computed in the cluster), fusion;
* encode: the query encoding alone (``Bundle.encode_query``: dense vector + learned BOW from one tokenisation), to
  show where the extra time goes;
* http (``--http``): ``POST /v1/rerank`` on a real ``semdup serve`` (uvicorn, 1 worker), loopback.

Reports p50 / p99 latency (ms) and sequential throughput (calls/s) of each, and the ratios rerank / bm25
(target p99 ≤ 2 × bm25, issue #11). With ``--threads N`` a second pass runs N concurrent callers for the throughput
under load. With ``--http``, a load pass then runs ``--callers`` (default 1, 8 and 50) concurrent callers
against the service and, at the same concurrency, against plain BM25: p50, p99 and throughput of each (the
service started with ``--workers`` / ``--server-threads`` / ``--server-onnx-threads``, default: its own
defaults). Loopback only, so the callers share the machine with the service and OpenSearch; every loop is
bounded by ``--queries`` × ``--rounds`` (``--load-calls`` per concurrency). No torch is imported.

Example::

    python -m benchmarks.rerank_latency --bundle artifacts/bundles/bow-cnn-travel --rounds 3
    python -m benchmarks.rerank_latency --bundle B --http --callers 1,8,50 --rounds 1
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from benchmarks.indexing import _hardware, _versions
from benchmarks.report import elapsed_ms

logger = logging.getLogger(__name__)

TARGET = 2.0  # p99 of a rerank call within this many times the plain BM25 search (issue #11)


def _percentiles(ms: Sequence[float]) -> dict[str, float]:
    x = np.asarray(ms, dtype=np.float64)
    return {
        "p50": float(np.percentile(x, 50)),
        "p99": float(np.percentile(x, 99)),
        "mean": float(x.mean()),
        "n": int(x.size),
    }



def _concurrent(calls: Sequence[Callable[[], Any]], threads: int) -> float:
    """Calls per second with ``threads`` concurrent callers over the given bounded list of calls."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(lambda f: f(), calls))
    return len(calls) / (time.perf_counter() - t0)


def _under_load(calls: Sequence[Callable[[], Any]], callers: int) -> dict[str, float]:
    """p50 / p99 latency (ms) of each call and throughput (calls/s) with ``callers`` concurrent callers."""
    times: list[float] = []

    def one(call: Callable[[], Any]) -> None:
        times.append(elapsed_ms(call))  # list.append is atomic under the GIL

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=callers) as pool:
        list(pool.map(one, calls))
    wall = time.perf_counter() - t0
    return {**_percentiles(times), "calls_s": len(calls) / wall}


def _start_service(bundle: str, index: str, url: str, server_env: dict[str, str] | None = None) -> tuple[Any, Any]:
    """A real ``semdup serve`` on a free loopback port (field cache off), and an httpx client with its key."""
    import secrets
    import subprocess

    import httpx

    from semdup.devstack.local_process import any_free_port

    port, key = any_free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        "SEMDUP_API_KEY": key,
        "SEMDUP_OPENSEARCH_URL": url,
        "SEMDUP_SEARCH_TIMEOUT": "30",
        "SEMDUP_MAX_IN_FLIGHT": "0",  # every call answered, queued as they come: its load pass times the queue
        **(server_env or {}),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "semdup", "serve", "--bundle", bundle, "--index", index, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)  # one per concurrent caller
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"X-API-Key": key}, timeout=60, limits=limits)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if client.get("/readyz").status_code == 200:
                return client, proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise RuntimeError("semdup serve did not become ready within 120 s; run it by hand to see why")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--bundle", required=True, help="model bundle directory or .tar.gz")
    parser.add_argument("--opensearch", default=None, help="OpenSearch URL (default: settings / the embedded node)")
    parser.add_argument("--queries", type=int, default=200, help="real query posts (Travel test + dev queries)")
    parser.add_argument("--rounds", type=int, default=3, help="passes over the queries (interleaved methods)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls of each method first")
    parser.add_argument("--k-candidates", type=int, default=100)
    parser.add_argument("--k", type=int, default=10, help="candidates returned by the rerank call")
    parser.add_argument("--onnx-threads", type=int, default=1, help="onnxruntime intra-op threads")
    parser.add_argument(
        "--knn",
        choices=("auto", "on", "off"),
        default="auto",
        help="the rerank's k-NN candidates: auto (the default: on where the index maps the vector), on, off "
        "(BM25 candidates alone, searched while the query is encoded)",
    )
    parser.add_argument("--threads", type=int, default=4, help="concurrent callers for the throughput pass (0 = skip)")
    parser.add_argument(
        "--http",
        action="store_true",
        help="also time POST /v1/rerank on a real `semdup serve` (1 worker, field cache off) on loopback",
    )
    parser.add_argument(
        "--callers",
        default="1,8,50",
        help="with --http: comma-separated concurrent callers of the load pass (service and BM25 alike)",
    )
    parser.add_argument("--load-calls", type=int, default=300, help="calls per concurrency level of the load pass")
    parser.add_argument("--workers", type=int, default=None, help="the service's uvicorn workers (default: its own)")
    parser.add_argument("--server-threads", type=int, default=None, help="the service's SEMDUP_THREADS")
    parser.add_argument("--server-onnx-threads", type=int, default=None, help="the service's SEMDUP_ONNX_THREADS")
    parser.add_argument("--keep-index", action="store_true")
    parser.add_argument(
        "--index", default=None, help="an existing index of the Travel posts with this bundle's fields (--keep-index)"
    )
    args = parser.parse_args(argv)
    callers = [int(c) for c in args.callers.split(",") if c.strip()]
    logging.basicConfig(level=logging.WARNING)

    import dataclasses

    import onnxruntime

    from semdup.apps.settings import load_settings
    from semdup.bundle.bundle import Bundle
    from semdup.data.paths import travel_dir
    from semdup.data.stackexchange import load_stackexchange_dump
    from semdup.evaluation.through_reranker import semantic_index
    from semdup.index_format.schema import CandidateFields
    from semdup.opensearch_io.clients import connect
    from semdup.reranker import Reranker, RerankerSettings
    from semdup.search_templates import query_text, template_id, template_params

    settings = load_settings().opensearch_settings()
    if args.opensearch:
        settings = dataclasses.replace(settings, url=args.opensearch)
    client = connect(settings, pool_maxsize=max([args.threads, *callers, 1]))  # no caller waits for a connection
    bundle = Bundle.load(args.bundle, intra_op_threads=args.onnx_threads)
    dump = load_stackexchange_dump(travel_dir())
    queries = [q.post for split in ("test", "dev") for q in dump.queries(split)][: args.queries]
    corpus = dump.corpus()
    server = client.info()["version"]["number"]

    print(f"command: {' '.join([sys.executable, '-m', 'benchmarks.rerank_latency', *sys.argv[1:]])}")
    print(f"hardware: {_hardware()}; load average at start {os.getloadavg()[0]:.1f} (other work shares these cores)")
    print(
        f"versions: {_versions()}, onnxruntime providers {onnxruntime.get_available_providers()}, "
        f"OpenSearch {server} at {settings.safe_url}"
    )
    print(
        f"bundle: {bundle.version} (dimension {bundle.dimension}, "
        f"BOW {'yes' if bundle.term_weights is not None else 'no'}); "
        f"corpus {len(corpus)} Travel posts; {len(queries)} query posts x {args.rounds} rounds, "
        f"{args.warmup} warm-up calls each; k_candidates {args.k_candidates}; onnx threads {args.onnx_threads}"
    )

    # the default index (packed fields, no hybrid search structures): what the default BM25-candidate reranker reads
    built = semantic_index(
        client, bundle, corpus, "latency", keep=args.keep_index, progress=True, search=CandidateFields()
    )
    with contextlib.nullcontext(args.index) if args.index else built as index:
        print(f"index: {index}")
        knn = {"auto": None, "on": True, "off": False}[args.knn]
        settings = RerankerSettings(k_candidates=args.k_candidates, search_timeout=30, knn=knn)
        rr = Reranker(bundle, client, index, settings)
        tid = template_id("bm25", "text")

        def bm25(post: Any) -> Callable[[], Any]:
            body = [
                {"index": index},
                {
                    "id": tid,
                    "params": template_params(
                        query_text(post.title, post.body), size=args.k_candidates, exclude_id=post.id
                    ),
                },
            ]
            return lambda: client.msearch_template(body=body, params={"request_timeout": 30})

        def rerank(post: Any) -> Callable[[], Any]:
            return lambda: rr.rank(post, k=args.k, exclude_id=post.id)

        def encode(post: Any) -> Callable[[], Any]:
            return lambda: bundle.encode_query(post)

        methods = {"bm25": bm25, "rerank": rerank, "encode": encode}
        server_env = {
            var: str(value)
            for var, value in (
                ("SEMDUP_WORKERS", args.workers),
                ("SEMDUP_THREADS", args.server_threads),
                ("SEMDUP_ONNX_THREADS", args.server_onnx_threads),
            )
            if value is not None
        }
        service = _start_service(args.bundle, index, settings.url, server_env) if args.http else None
        if service is not None:
            http, proc = service

            def over_http(post: Any) -> Callable[[], Any]:
                payload = {"title": post.title, "body": post.body, "k": args.k, "exclude_id": post.id}

                def call() -> None:
                    http.post("/v1/rerank", json=payload).raise_for_status()

                return call

            methods["http"] = over_http
        for make in methods.values():
            for post in queries[: args.warmup]:
                make(post)()
        times: dict[str, list[float]] = {name: [] for name in methods}
        n_candidates = []
        for _ in range(args.rounds):
            for post in queries:
                for name, make in methods.items():  # interleaved: drift hits every method alike
                    times[name].append(elapsed_ms(make(post)))
        for post in queries[:50]:
            n_candidates.append(len(rr.retrieve(post, exclude_id=post.id)[0].ids))
        stats = {name: _percentiles(t) for name, t in times.items()}
        throughput = {}
        if args.threads > 0:
            for name in ("bm25", "rerank"):
                if name in methods:
                    throughput[name] = _concurrent([methods[name](p) for p in queries], args.threads)
        load: dict[tuple[str, int], dict[str, float]] = {}
        if service is not None:
            picked = [queries[i % len(queries)] for i in range(args.load_calls)]
            for n in callers:
                for name in ("bm25", "http"):  # the same posts, one method after the other at each concurrency
                    load[name, n] = _under_load([methods[name](p) for p in picked], n)
        if service is not None:
            http.close()
            proc.terminate()
            proc.wait(timeout=30)

    print(f"load average at end {os.getloadavg()[0]:.1f}")
    print(f"mean candidates per rerank call: {np.mean(n_candidates):.1f}")
    print(
        f"{'method':<8} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'calls/s':>8} "
        f"{f'calls/s x{args.threads}':>12} {'n':>6}"
    )
    for name, s in stats.items():
        conc = f"{throughput[name]:12.1f}" if name in throughput else f"{'-':>12}"
        print(
            f"{name:<8} {s['p50']:8.2f} {s['p99']:8.2f} {s['mean']:8.2f} {1000.0 / s['mean']:8.1f} {conc} {s['n']:6d}"
        )
    p50 = stats["rerank"]["p50"] / stats["bm25"]["p50"]
    p99 = stats["rerank"]["p99"] / stats["bm25"]["p99"]
    verdict = "met" if p99 <= TARGET else "NOT met"
    print(f"ratio rerank / bm25: p50 {p50:.2f}x, p99 {p99:.2f}x (target p99 <= {TARGET:g}x: {verdict})")
    if load:
        shown = {
            name: "default" if value is None else value
            for name, value in (
                ("workers", args.workers),
                ("threads", args.server_threads),
                ("onnx threads", args.server_onnx_threads),
            )
        }
        served = ", ".join(f"{k} {v}" for k, v in shown.items())
        print(f"load pass: {args.load_calls} calls per concurrency; service {served}")
        print(f"{'callers':>7} {'method':<6} {'p50 ms':>8} {'p99 ms':>8} {'calls/s':>8} {'p99 / bm25':>10}")
        for n in callers:
            for name in ("bm25", "http"):
                row = load[name, n]
                ratio = row["p99"] / load["bm25", n]["p99"]
                print(f"{n:>7} {name:<6} {row['p50']:8.2f} {row['p99']:8.2f} {row['calls_s']:8.1f} {ratio:10.2f}")
    if throughput:
        print(
            "throughput ratio vs bm25 with "
            f"{args.threads} callers: "
            + ", ".join(f"{n} {throughput[n] / throughput['bm25']:.2f}" for n in throughput if n != "bm25")
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
