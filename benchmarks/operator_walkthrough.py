"""The README's "Using semdup on your own cluster", run as an operator would, and measured (not a test).

    python -m benchmarks.operator_walkthrough --bundle artifacts/demo/default-minilm-travel

It needs ``SEMDUP_OPENSEARCH_URL`` and ``SEMDUP_BROKER_URL`` (a cluster and a broker; `semdup opensearch start` and
`semdup broker start` give local ones) and does, with the ``semdup`` commands in subprocesses:

1. the site's index, made with plain opensearch-py: ``Title``, ``Body`` (Stack Exchange HTML), ``Tags``,
   ``CreationDate``, numeric ids, the default similarity, two indices behind the alias ``<prefix>-posts``; it holds
   the duplicates of ``--queries`` held-out Travel test posts plus other posts up to ``--posts``;
2. ``semdup enable --index <alias> --title-field Title --body-field Body --knn``, a ``semdup worker``,
   ``semdup backfill --index <alias>``;
3. the same posts into an index semdup creates (``semdup index-posts --knn``), the comparison;
4. ``semdup serve`` serving both, and one ``POST /v1/rerank`` per held-out post against each index.

It prints Accuracy@1/5/10 (``semdup.measures.ranking.accuracy_at_k``) on both and the largest score difference between
them. The held-out posts are Travel *test* posts: nothing is chosen here, this is a parity check.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.site_index import make_site_alias
from semdup.core.posts import Post
from semdup.data.paths import default_data_dir
from semdup.data.stackexchange import load_stackexchange_dump
from semdup.measures.ranking import accuracy_at_k

__all__ = ["site_corpus", "main"]

_TRAVEL = default_data_dir() / "travel-stackexchange"  # SEMDUP_DATA_DIR, else shared/data beside the checkout


def site_corpus(n_posts: int, n_queries: int) -> tuple[list[Post], list[Post], dict[str, set[str]]]:
    """``(posts in the site's index, held-out query posts, query id -> its duplicates in the index)``: test queries
    whose duplicates are all kept, the rest of the index filled with other posts in id order."""
    dump = load_stackexchange_dump(_TRAVEL)
    queries = [q for q in dump.queries("test") if q.relevant][:n_queries]
    held_out = {q.post.id for q in queries}
    keep: dict[str, Post] = {}
    for q in queries:
        for d in sorted(q.relevant - held_out):
            keep[d] = dump.posts[d]
    for pid in sorted(dump.posts, key=int):
        if len(keep) >= n_posts:
            break
        if pid not in held_out:
            keep.setdefault(pid, dump.posts[pid])
    relevant = {q.post.id: set(q.relevant) & keep.keys() for q in queries}
    return list(keep.values()), [q.post for q in queries], relevant


def _semdup(*args: str, env: dict[str, str]) -> None:
    cmd = [sys.executable, "-m", "semdup", *args]
    print("$ semdup " + " ".join(args), flush=True)
    subprocess.run(cmd, env=env, check=True)


def _post_json(url: str, body: dict[str, Any], key: str) -> dict[str, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", "X-API-Key": key}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def _wait_ready(url: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise RuntimeError(f"semdup serve did not become ready at {url} in {timeout:.0f} s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bundle", required=True)
    p.add_argument("--posts", type=int, default=1000)
    p.add_argument("--queries", type=int, default=60)
    p.add_argument("--prefix", default="walkthrough")
    p.add_argument("--port", type=int, default=8093)
    p.add_argument("--keep", action="store_true", help="Leave the indices in place.")
    args = p.parse_args(argv)

    from semdup.apps.settings import load_settings
    from semdup.opensearch_io.clients import connect

    client = connect(load_settings().opensearch_settings())
    alias, own = f"{args.prefix}-posts", f"{args.prefix}-own"
    client.indices.delete(index=f"{args.prefix}-*", ignore_unavailable=True)
    posts, queries, relevant = site_corpus(args.posts, args.queries)
    print(f"site index {alias}: {len(posts)} Travel posts in two indices; {len(queries)} held-out test queries")
    make_site_alias(client, alias, posts)

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs: list[subprocess.Popen[bytes]] = []
    key = secrets.token_hex(24)  # a search key: the walkthrough only reads
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            log = open(Path(tmp) / "worker.log", "wb")  # noqa: SIM115 - closed with the directory
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "semdup", "worker", "--bundle", args.bundle, "-c", "1"],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
            _semdup("enable", "--index", alias, "--bundle", args.bundle, "--title-field", "Title",
                    "--body-field", "Body", "--knn", env=env)  # fmt: skip
            _semdup("backfill", "--index", alias, env=env)
            jsonl = Path(tmp) / "posts.jsonl"
            jsonl.write_text("".join(json.dumps(p.to_json()) + "\n" for p in posts))
            _semdup("index-posts", "--input", str(jsonl), "--index", own, "--bundle", args.bundle, "--knn", env=env)
            filled = time.monotonic() - started
            serve_env = {**env, "SEMDUP_API_KEY": key, "SEMDUP_INDICES": own}
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "semdup", "serve", "--bundle", args.bundle, "--index", alias, "--knn",
                     "--port", str(args.port), "--workers", "1"],
                    env=serve_env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )  # fmt: skip
            url = f"http://127.0.0.1:{args.port}"
            _wait_ready(url)
            ranked: dict[str, dict[str, list[str]]] = {alias: {}, own: {}}
            scores: dict[str, dict[str, list[float]]] = {alias: {}, own: {}}
            empty = 0
            for q in queries:
                for index in (alias, own):
                    body = {"title": q.title, "body": q.body, "k": 10, "index": index}
                    out = _post_json(url + "/v1/rerank", body, key)
                    ranked[index][q.id] = [c["id"] for c in out["candidates"]]
                    scores[index][q.id] = [c["score"] for c in out["candidates"]]
                    empty += not out["candidates"]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=60)
        if not args.keep:
            client.indices.delete(index=f"{args.prefix}-*", ignore_unavailable=True)
    diff = max(
        (abs(a - b) for qid in scores[alias] for a, b in zip(scores[alias][qid], scores[own][qid], strict=False)),
        default=0.0,
    )
    same_order = sum(ranked[alias][q] == ranked[own][q] for q in ranked[alias])
    print(f"\nfilled both in {filled:.0f} s; {empty} empty answers")
    print(f"{'index':<42} {'Acc@1':>6} {'Acc@5':>6} {'Acc@10':>6}")
    for name, label in ((alias, "site's index (enable + backfill, companion)"), (own, "index semdup created")):
        acc = accuracy_at_k(ranked[name], relevant)
        print(f"{label:<42} {acc['Acc@1']:6.2f} {acc['Acc@5']:6.2f} {acc['Acc@10']:6.2f}")
    print(f"same top-10 order for {same_order} of {len(queries)} queries; largest score difference {diff:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
