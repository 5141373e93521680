"""Semantic indexing vs plain lexical bulk indexing of the same posts, on this machine, in one run.

Measures, over the same posts and the same OpenSearch:

* lexical: text pipeline cleaning + bulk ``index`` of the lexical fields (what a plain BM25 index costs);
* semantic: the same plus the bundle's encoder (dense vector + learned BOW weights) and the ``semdup`` fields
  — the work one indexing task does, without the broker hop;
* encoder only: ``Bundle.document_fields`` with no OpenSearch at all.

Each condition runs ``--runs`` times into a fresh index; the median posts/s is reported with the ratio
semantic / lexical (target on CPU: ≥ 0.5). No torch is imported.

Example::

    python -m semdup.evaluation.benchmarks.indexing --bundle artifacts/bundles/bow-cnn --runs 3
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

from semdup.posts import Post

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--bundle", required=True, help="model bundle directory or .tar.gz")
    parser.add_argument("--data", default=None, help="Stack Exchange dump folder (default: the Travel dump)")
    parser.add_argument("--posts", type=int, default=0, help="use only the first N posts (0 = all)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64, help="posts per encoder call / indexing task")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    parser.add_argument("--no-knn", action="store_true", help="store the vector unindexed even if k-NN is there")
    args = parser.parse_args(argv)

    from semdup.config import OpenSearchSettings, connect
    from semdup.deploy.local_opensearch import knn_available
    from semdup.evaluation.data_paths import travel_dir
    from semdup.evaluation.datasets.stackexchange import load_stackexchange_dump
    from semdup.export.bundle import Bundle
    from semdup.indexer.bulk import bulk_write, chunked
    from semdup.indexer.documents import index_action, lexical_document
    from semdup.indexer.lexical_index import create_index, delete_index
    from semdup.indexer.semantic import semdup_source

    posts: list[Post] = list(load_stackexchange_dump(args.data or travel_dir()).posts.values())
    if args.posts:
        posts = posts[: args.posts]
    bundle = Bundle.load(args.bundle, intra_op_threads=args.threads)
    client = connect(OpenSearchSettings.from_env())
    knn = bundle.dimension is not None and not args.no_knn and knn_available(client)
    index = f"semdup-bench-{os.getpid()}"

    def lexical() -> None:
        report = bulk_write(client, (index_action(index, p) for p in posts), total=len(posts))
        client.indices.refresh(index=index)
        if report.failed:
            raise RuntimeError(f"{len(report.failed)} lexical writes failed: {report.failed[:3]}")

    def semantic() -> None:
        def actions():
            for batch in chunked(posts, args.batch_size):
                for post, fields in zip(batch, bundle.document_fields(batch), strict=True):
                    source = lexical_document(post)
                    source["semdup"] = semdup_source(fields)
                    yield {"_op_type": "index", "_index": index, "_id": post.id, "_source": source}

        report = bulk_write(client, actions(), total=len(posts), chunk_size=args.batch_size * 4)
        client.indices.refresh(index=index)
        if report.failed:
            raise RuntimeError(f"{len(report.failed)} semantic writes failed: {report.failed[:3]}")

    def encoder_only() -> None:
        for batch in chunked(posts, args.batch_size):
            bundle.document_fields(batch)

    times: dict[str, list[float]] = {"lexical": [], "semantic": [], "encoder": []}
    try:
        for _ in range(args.runs):
            for name, fn, dim in (("lexical", lexical, None), ("semantic", semantic, bundle.dimension)):
                create_index(client, index, dimension=dim, knn=knn and dim is not None, recreate=True)
                times[name].append(_time(fn))
            times["encoder"].append(_time(encoder_only))
    finally:
        delete_index(client, index)

    rate = {k: len(posts) / statistics.median(v) for k, v in times.items()}
    module = __spec__.name if __spec__ else __name__
    providers = bundle.session.get_providers() if bundle.session else []
    print(f"command:   python -m {module} {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"hardware:  {_hardware()}")
    print(f"versions:  {_versions()}; OpenSearch {client.info()['version']['number']}; providers {providers}")
    print(f"bundle:    {bundle.version} (dimension {bundle.dimension}); knn_vector {knn}; onnx threads {args.threads}")
    print(f"posts:     {len(posts)}; runs {args.runs} (median); batch {args.batch_size}")
    labels = {"lexical": "lexical bulk indexing", "semantic": "semantic indexing", "encoder": "encoder only (CPU)"}
    for key, label in labels.items():
        runs = ", ".join(f"{t:.2f}s" for t in times[key])
        print(f"{label + ':':<25}{rate[key]:8.1f} posts/s  (runs: {runs})")
    ratio = rate["semantic"] / rate["lexical"]
    print(f"ratio semantic/lexical:  {ratio:.2f}  (target >= 0.50: {'OK' if ratio >= 0.5 else 'BELOW'})")
    return 0


if __name__ == "__main__":
    from semdup.errors import SemdupError

    try:
        sys.exit(main())
    except SemdupError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(1)
