"""Ways to encode a rerank query's body and title, timed on Travel test queries (issue #28), torch-free.

Run::

    python -m experiments.query_encoding --bundle artifacts/demo/default-minilm-travel [--queries 100]

For each query, the variants alternate (the order turning per query), each timed around the whole encoding:

* ``body, title · 1 thread`` / ``· 2 threads``: two onnxruntime runs one after the other on a session with 1 or 2
  intra-op threads (the reranker's :class:`~semdup.reranker.encoding.QueryEncoder`, 2 by default);
* ``body ‖ title · 1 thread``: the title on a second thread beside the body (the query path before issue #28);
* ``batch of 2 · 1 thread`` / ``· 2 threads``: one run of [body, title], the title padded to the body's length;
* ``body alone · 1 thread`` / ``· 2 threads``: what a bundle without a title term encodes.

Beside the times: whether 2 threads give the 1-thread vectors to the bit, and the largest difference a batch of 2
makes to the title's and the body's vectors (padding changes the float sums). The machine's load average is
printed with them: on a shared machine only the ratios of one run mean anything.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from semdup.bundle.bundle import Bundle
from semdup.core.posts import Post
from semdup.data.paths import travel_dir
from semdup.data.stackexchange import load_stackexchange_dump

Pair = tuple[np.ndarray, np.ndarray | None]


def variants(b1: Bundle, b2: Bundle, pool: ThreadPoolExecutor) -> dict[str, Callable[[Post], Pair]]:
    """Each way of encoding one post's body and title: name -> post -> (body vector, title vector)."""

    def sequential(b: Bundle) -> Callable[[Post], Pair]:
        return lambda p: (b.encode_query(p)[0], b.encode_titles([p])[0])

    def beside(p: Post) -> Pair:
        title = pool.submit(b1.encode_titles, [p])
        return b1.encode_query(p)[0], title.result()[0]

    def batch(b: Bundle) -> Callable[[Post], Pair]:
        def encode(p: Post) -> Pair:
            x = b._dense([p, Post(p.id, p.title, "")], None, 2)  # one run: both rows padded to the longer one
            return x[0], x[1]

        return encode

    return {
        "body, title · 1 thread": sequential(b1),
        "body, title · 2 threads": sequential(b2),
        "body ‖ title · 1 thread": beside,
        "batch of 2 · 1 thread": batch(b1),
        "batch of 2 · 2 threads": batch(b2),
        "body alone · 1 thread": lambda p: (b1.encode_query(p)[0], None),
        "body alone · 2 threads": lambda p: (b2.encode_query(p)[0], None),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--bundle", required=True, help="a base-encoder bundle (the MiniLM default)")
    ap.add_argument("--queries", type=int, default=100, help="Travel test queries (those with a title)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    loads = {"start": os.getloadavg()[0]}
    b1 = Bundle.load(args.bundle, providers=["CPUExecutionProvider"], intra_op_threads=1)
    b2 = Bundle.load(args.bundle, providers=["CPUExecutionProvider"], intra_op_threads=2)
    queries = [q.post for q in load_stackexchange_dump(travel_dir()).queries("test") if q.post.title.strip()]
    queries = queries[: args.queries]
    with ThreadPoolExecutor(1) as pool:
        ways = variants(b1, b2, pool)
        for p in queries[:5]:
            for fn in ways.values():
                fn(p)
        ms: dict[str, list[float]] = {n: [] for n in ways}
        same_threads, batch_diff = 0, {"body": 0.0, "title": 0.0}
        names = list(ways)
        for r in range(args.rounds):
            for i, p in enumerate(queries):
                k = (i + r) % len(names)
                got: dict[str, Any] = {}
                for n in names[k:] + names[:k]:
                    t0 = time.perf_counter()
                    got[n] = ways[n](p)
                    ms[n].append((time.perf_counter() - t0) * 1000.0)
                one, two = got["body, title · 1 thread"], got["body, title · 2 threads"]
                same_threads += bool(np.array_equal(one[0], two[0]) and np.array_equal(one[1], two[1]))
                batched = got["batch of 2 · 1 thread"]
                batch_diff["body"] = max(batch_diff["body"], float(np.abs(batched[0] - one[0]).max()))
                batch_diff["title"] = max(batch_diff["title"], float(np.abs(batched[1] - one[1]).max()))
    loads["end"] = os.getloadavg()[0]
    base = ms["body ‖ title · 1 thread"]
    report = {
        "bundle": b1.version,
        "calls": len(queries) * args.rounds,
        "ms": {n: {"p50": round(float(np.percentile(v, 50)), 2), "p99": round(float(np.percentile(v, 99)), 2),
                   "p50_ratio": round(float(np.percentile(v, 50) / np.percentile(base, 50)), 3)}
               for n, v in ms.items()},
        "two_threads_equal_to_the_bit": f"{same_threads}/{len(queries) * args.rounds}",
        "batch_of_2_max_abs_diff": batch_diff,
        "load_average": {k: round(v, 2) for k, v in loads.items()},
    }
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"bundle {report['bundle']}; {report['calls']} encodings of Travel test queries; "
          f"load average {report['load_average']}")
    for n, q in report["ms"].items():
        print(f"  {n:26s} p50 {q['p50']:7.2f} ms  p99 {q['p99']:7.2f} ms  p50 ÷ body ‖ title {q['p50_ratio']:.3f}")
    print(f"2 threads = 1 thread to the bit: {report['two_threads_equal_to_the_bit']}; a batch of 2 moves the body's "
          f"vector by up to {batch_diff['body']:.2e} and the title's by {batch_diff['title']:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
