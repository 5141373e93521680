"""Semantic indexing vs plain lexical bulk indexing of the same posts, on this machine, in one run.

Measures, over the same posts (given as the JSON objects an indexing task receives), the same OpenSearch, the
same index settings (semdup's schema, 1 shard, refresh every 1 s; the semantic index adds the ``semdup``
fields) and the same bulk settings (one batch of ``--batch-size`` posts per task, refresh at the end):

* lexical: per batch, parse the posts, clean them with the text pipeline and bulk-``index`` the lexical fields
  in one request (what a plain BM25 indexing task costs);
* semantic: per batch, :func:`semdup.indexer.batch_writer.index_batch` — the function the Celery ``index_posts``
  task runs (text pipeline + encoder + term weights + bulk; a batch larger than ``--chunk`` posts is written in
  chunks, each encoded while the previous chunk's request is in flight), without the broker hop and the
  once-per-task mapping read, into an index as ``semdup index-posts`` creates it by default: the lexical fields
  plus ``semdup.packed`` (vector and term weights, what the reranker's fusion reads);
* semantic +sparse+knn: the same into an index that also holds the hybrid candidate paths' search structures
  (``--sparse --knn``: rank_features and the HNSW graph; +knn only where the k-NN plugin is there);
* encoder only: ``Bundle.document_fields`` per batch with no OpenSearch at all.

Conditions are interleaved run by run, each run into a fresh index; the median posts/s is reported with the
ratios semantic / lexical (target on CPU: ≥ 0.5, for the default index). Beside wall time it prints the CPU
seconds the client process and the OpenSearch node(s) (``_nodes/stats``) spent per run, and the load average,
because on a shared machine wall time follows the CPU share. No torch is imported.

Example::

    python -m benchmarks.indexing --bundle artifacts/bundles/bow-cnn-travel --runs 3
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from importlib import metadata
from typing import Any

from semdup.core.posts import Post

logger = logging.getLogger(__name__)


def _hardware() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical cores, {platform.system()} {platform.release()}"


def _versions() -> str:
    names = ("semdup", "onnxruntime", "numpy", "opensearch-py", "celery")
    out = []
    for n in names:
        try:
            out.append(f"{n} {metadata.version(n)}")
        except metadata.PackageNotFoundError:
            out.append(f"{n} absent")
    return ", ".join(out)


def _time(fn: Callable[[], None]) -> float:
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def _node_cpu_seconds(client: Any) -> float:
    """Total CPU seconds of every OpenSearch node's process so far (0 when the stats do not say)."""
    time.sleep(1.1)  # the nodes refresh their process stats once a second
    stats = client.nodes.stats(metric="process", request_timeout=30)
    return sum(n.get("process", {}).get("cpu", {}).get("total_in_millis", 0) for n in stats["nodes"].values()) / 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--bundle", required=True, help="model bundle directory or .tar.gz")
    parser.add_argument("--data", default=None, help="Stack Exchange dump folder (default: the Travel dump)")
    parser.add_argument("--posts", type=int, default=0, help="use only the first N posts (0 = all)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64, help="posts per task = per lexical bulk request")
    parser.add_argument("--chunk", type=int, default=None,
                        help="index_batch chunk (default: index_batch's own, batch_writer.chunk_size_for)")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    parser.add_argument("--no-knn", action="store_true", help="leave the HNSW graph out of the +sparse+knn condition")
    args = parser.parse_args(argv)

    from semdup.apps.settings import load_settings
    from semdup.bundle.bundle import Bundle
    from semdup.data.paths import travel_dir
    from semdup.data.stackexchange import load_stackexchange_dump
    from semdup.index_format.documents import index_action
    from semdup.index_format.schema import CandidateFields
    from semdup.indexer.batch_writer import index_batch
    from semdup.ingest.lexical_index import create_index, delete_index
    from semdup.opensearch_io.bulk import bulk_write, chunked
    from semdup.opensearch_io.clients import connect, knn_available

    posts: list[Post] = list(load_stackexchange_dump(args.data or travel_dir()).posts.values())
    if args.posts:
        posts = posts[: args.posts]
    payloads = [p.to_json() for p in posts]
    chunk = args.chunk
    bundle = Bundle.load(args.bundle, intra_op_threads=args.threads)
    client = connect(load_settings().opensearch_settings())
    knn = bundle.dimension is not None and not args.no_knn and knn_available(client)
    index = f"semdup-bench-{os.getpid()}"

    def lexical() -> None:
        for batch in chunked(payloads, args.batch_size):
            actions = [index_action(index, Post.from_json(obj)) for obj in batch]
            report = bulk_write(client, actions, total=len(actions), chunk_size=len(actions))
            if report.failed:
                raise RuntimeError(f"{len(report.failed)} lexical writes failed: {report.failed[:3]}")
        client.indices.refresh(index=index)

    def semantic(search: CandidateFields) -> Callable[[], None]:
        def run() -> None:
            for batch in chunked(payloads, args.batch_size):
                result = index_batch(client, index, batch, bundle, chunk_size=chunk, search=search)
                if result.failed:
                    raise RuntimeError(f"{len(result.failed)} semantic writes failed: {result.failed[:3]}")
            client.indices.refresh(index=index)

        return run

    def encoder_only() -> None:
        for batch in chunked(posts, args.batch_size):
            bundle.document_fields(batch)

    hybrid = CandidateFields(sparse=bundle.term_weights is not None, knn=knn)
    # (name, run, the index it writes into: None = no index, else (dimension, search structures))
    conditions: tuple[tuple[str, Callable[[], None], tuple[int | None, CandidateFields] | None], ...] = (
        ("lexical", lexical, (None, CandidateFields())),
        ("semantic", semantic(CandidateFields()), (bundle.dimension, CandidateFields())),
        ("hybrid", semantic(hybrid), (bundle.dimension, hybrid)),
        ("encoder", encoder_only, None),
    )
    times: dict[str, list[float]] = {name: [] for name, _, _ in conditions}
    client_cpu: dict[str, list[float]] = {name: [] for name, _, _ in conditions}
    server_cpu: dict[str, list[float]] = {name: [] for name, _, _ in conditions}
    load_before = os.getloadavg()
    try:
        for _ in range(args.runs):
            for name, fn, target in conditions:
                if target is not None:
                    dim, fields = target
                    create_index(client, index, dimension=dim, knn=fields.knn, sparse=fields.sparse, recreate=True)
                s0, c0 = _node_cpu_seconds(client), time.process_time()
                times[name].append(_time(fn))
                client_cpu[name].append(time.process_time() - c0)
                server_cpu[name].append(_node_cpu_seconds(client) - s0)
    finally:
        delete_index(client, index)
    load_after = os.getloadavg()

    rate = {k: len(posts) / statistics.median(v) for k, v in times.items()}
    module = __spec__.name if __spec__ else __name__
    providers = bundle.session.get_providers() if bundle.session else []
    print(f"command:   python -m {module} {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"hardware:  {_hardware()}")
    print(f"load avg:  {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} before, "
          f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} after (1/5/15 min)")
    print(f"versions:  {_versions()}; OpenSearch {client.info()['version']['number']}; providers {providers}")
    print(f"bundle:    {bundle.version} (dimension {bundle.dimension}); onnx threads {args.threads}")
    print(f"posts:     {len(posts)}; runs {args.runs} (median, interleaved); {args.batch_size} posts per task and "
          f"per lexical bulk request; index_batch chunk {chunk}; refresh 1 s + once at the end")
    labels = {
        "lexical": "lexical bulk indexing",
        "semantic": "semantic (index_batch)",
        "hybrid": f"semantic +{hybrid.describe()}",
        "encoder": "encoder only (CPU)",
    }
    for key, label in labels.items():
        runs = ", ".join(f"{t:.2f}s" for t in times[key])
        cpu = (
            f"client CPU {statistics.median(client_cpu[key]):.1f}s, "
            f"OpenSearch CPU {statistics.median(server_cpu[key]):.1f}s"
        )
        print(f"{label + ':':<27}{rate[key]:8.1f} posts/s  (runs: {runs}; median {cpu})")
    ratio = rate["semantic"] / rate["lexical"]
    verdict = "OK" if ratio >= 0.5 else "BELOW"
    print(f"ratio semantic/lexical:    {ratio:.2f}  (default index; target >= 0.50: {verdict})")
    print(f"ratio +{hybrid.describe()}/lexical: {rate['hybrid'] / rate['lexical']:.2f}  (with the hybrid candidate "
          "paths' search structures)")
    return 0


if __name__ == "__main__":
    from benchmarks import run_main

    run_main(main)
