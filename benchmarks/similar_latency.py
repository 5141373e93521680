"""``GET /v1/similar`` latency vs the plain BM25 template search, in one run, and its title-only quality on Travel.

    python -m benchmarks.similar_latency --bundle artifacts/demo/default-minilm-travel \\
        --vectors artifacts/demo/cache/dense-3602748718d84b07.npy \\
        --titles artifacts/demo/cache/dense-f9d2a03a8b4fcb7c.npy

A node of this run's own (a temporary state folder, a free port; or ``--opensearch``) holds every Travel post with
the bundle's fields, k-NN mapped (:mod:`benchmarks.similar_index`). A real ``semdup serve`` (one uvicorn
worker) serves it. The query titles are the Travel dev and test queries' titles; each round goes through them,
the two calls alternating title by title:

* bm25: one ``_msearch/template`` of the stored ``semdup-bm25-title`` template, top ``--size``, ids only: what a
  site's own "similar titles" search costs, from this client straight to OpenSearch;
* similar: ``GET /v1/similar?title=…&size=--size`` on the service (loopback, keep-alive): the title's encoding, one
  ``_msearch`` of BM25 and k-NN candidates with their packed fields and titles, the fusion, HTTP and JSON.

The encoding alone (``Bundle.encode_query`` of the title, in this process, one onnxruntime thread as the service
has by default) is timed beside, to show where the extra time goes. Prints p50 / p99 (ms) of each, the ratios
similar / bm25 (target p99 ≤ 2×, issue #20) and the load average after each round; then, unless ``--no-quality``,
the title-only quality (:mod:`benchmarks.similar_eval`: Acc@5 and MAP on Travel test of the service's
ranking vs BM25 of the title, the fusion chosen on dev). No torch is imported.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import run_main
from benchmarks.bench_stack import serve_process
from benchmarks.indexing import _hardware, _versions
from benchmarks.report import elapsed_ms, format_table, ratio, summary
from semdup.devstack.local_opensearch import own_opensearch

logger = logging.getLogger(__name__)

TARGET = 2.0  # p99 of /v1/similar within this many times the BM25 template search (issue #20)


def serving(bundle: str, index: str, url: str, log: Path) -> contextlib.AbstractContextManager[tuple[str, str]]:
    """A real ``semdup serve`` (one worker, no admission bound, one onnxruntime thread); yields (base URL, key)."""
    env = {**os.environ, "SEMDUP_SEARCH_TIMEOUT": "30", "SEMDUP_MAX_IN_FLIGHT": "0", "OMP_NUM_THREADS": "1"}
    env.pop("SEMDUP_API_KEYS", None)
    return serve_process(bundle, index, url, env, log)



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--bundle", required=True, help="model bundle directory or .tar.gz")
    parser.add_argument("--vectors", help="the corpus's dense vectors, .npy in Posts.xml order (checked)")
    parser.add_argument("--titles", help="the corpus's title vectors, .npy in Posts.xml order (checked)")
    parser.add_argument("--opensearch", help="a running OpenSearch (default: a node of this run's own)")
    parser.add_argument("--rounds", type=int, default=3, help="passes over the query titles")
    parser.add_argument("--warmup", type=int, default=30, help="untimed calls of each first")
    parser.add_argument("--size", type=int, default=5, help="posts each call returns")
    parser.add_argument("--no-quality", action="store_true", help="skip the Travel title-only quality")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    import httpx

    from benchmarks import similar_eval
    from benchmarks.similar_index import similar_index
    from semdup.bundle.bundle import Bundle
    from semdup.core.posts import Post
    from semdup.core.settings import OpenSearchSettings
    from semdup.data.paths import travel_dir
    from semdup.data.stackexchange import load_stackexchange_dump
    from semdup.opensearch_io.clients import connect
    from semdup.search_templates import query_text, template_id, template_params

    bundle = Bundle.load(args.bundle, intra_op_threads=1)
    dump = load_stackexchange_dump(travel_dir())
    titles = [q.post.title for split in ("dev", "test") for q in dump.queries(split)]
    print(f"command: {' '.join([sys.executable, '-m', __spec__.name if __spec__ else __name__, *sys.argv[1:]])}")
    print(f"hardware: {_hardware()}; load average at start {os.getloadavg()[0]:.2f} (other work shares these cores)")
    print(f"versions: {_versions()}")
    print(
        f"bundle {bundle.version}; {len(dump.corpus())} Travel posts indexed (k-NN mapped); {len(titles)} query "
        f"titles (Travel dev + test) x {args.rounds} rounds, calls alternating, {args.warmup} warm-up calls each; "
        f"size {args.size}"
    )
    work = Path(tempfile.mkdtemp(prefix="semdup-bench-similar-logs-"))
    rows: list[list[object]] = []
    with own_opensearch(args.opensearch, "similar") as url:
        client = connect(OpenSearchSettings(url=url))
        print(f"OpenSearch {client.info()['version']['number']} at {url}")
        built = similar_index(
            client, bundle, dump.corpus(), vectors=args.vectors, titles=args.titles, name="semdup-bench-similar"
        )
        with built as index, serving(args.bundle, index, url, work / "serve.log") as (base, key):
            http = httpx.Client(base_url=base, headers={"X-API-Key": key}, timeout=60)
            tid = template_id("bm25", "title")

            def bm25(title: str) -> Callable[[], Any]:
                body = [{"index": index}, {"id": tid, "params": template_params(query_text(title), size=args.size)}]
                return lambda: client.msearch_template(body=body, params={"request_timeout": 30})

            def similar(title: str) -> Callable[[], Any]:
                def call() -> None:
                    r = http.get("/v1/similar", params={"title": title, "size": args.size})
                    r.raise_for_status()

                return call

            def encode(title: str) -> Callable[[], Any]:
                return lambda: bundle.encode_query(Post("_title", title, ""))

            methods = {"bm25": bm25, "similar": similar, "encode": encode}
            for title in titles[: args.warmup]:
                for make in methods.values():
                    make(title)()
            times: dict[str, list[float]] = {m: [] for m in methods}
            for r in range(args.rounds):
                for title in titles:
                    for name, make in methods.items():
                        times[name].append(elapsed_ms(make(title)))
                print(f"round {r + 1}: load average {os.getloadavg()[0]:.2f}", flush=True)
            http.close()
            stats = {m: summary(x) for m, x in times.items()}
            for m, s in stats.items():
                rows.append([m, s["n"], s["p50"], s["p95"], s["p99"], s["mean"]])
            print(format_table(["call", "n", "p50 ms", "p95 ms", "p99 ms", "mean ms"], rows))
            p50 = ratio(stats["similar"]["p50"], stats["bm25"]["p50"])
            p99 = ratio(stats["similar"]["p99"], stats["bm25"]["p99"])
            met = stats["similar"]["p99"] <= TARGET * stats["bm25"]["p99"]
            print(f"similar / bm25: p50 {p50}, p99 {p99} (target p99 <= {TARGET:g}x: {'met' if met else 'NOT met'})")
            print(f"load average at end of the timing {os.getloadavg()[0]:.2f}; service log {work / 'serve.log'}")
            if not args.no_quality:
                result = similar_eval.run(client, args.bundle, vectors=None, titles=None, index=index, progress=False)
                similar_eval.print_result(result)
    return 0


if __name__ == "__main__":
    run_main(main)
