"""What semdup costs a site's own index: the companion (today) vs semdup's fields in the site's documents (the old
in-place design), on this machine, in one run (not a test).

The site's index is built the way a Q&A site would, with plain opensearch-py (``Title``, ``Body`` as HTML, ``Tags``,
``CreationDate``, ``Score``; one concrete index behind the alias the site uses), from ``--posts`` Travel posts.
Then, over the same posts and the same OpenSearch:

* plain: the site's index as the site made it, measured before semdup touches anything;
* in-place: the old design (``git show 24c9dcb:semdup/indexer/enable.py``) reproduced directly with opensearch-py
  on a copy of the site's index: ``put_mapping`` of a ``semdup`` object (``model`` keyword, ``packed`` binary doc
  values), then a scripted partial update per post writing ``semdup.model`` and ``semdup.packed``
  (:func:`semdup.index_format.mapping.semdup_source` of ``Bundle.document_fields``);
* companion: ``enable_index`` on the site's alias, the companion filled by ``sync_batch`` (the ``sync_posts`` task's
  work without Celery); the site's index is measured again afterwards;
* semdup-created: an index made by ``create_index`` + ``index_batch`` with the same posts (the reranker's own layout).

Each post is encoded once and the vectors reused by all three writers (a cache keyed by title and body: the
encoder's cost is ``indexing.py``'s subject, not this one's). It prints one table:

* the site's own search (a match query on ``Body``, 50 hits, default ``_source``): response bytes, and whether its
  hits are the plain index's;
* rerank latency p50 / p99 over ``--queries`` held-out posts, 100 candidates, interleaved query by query: the
  Reranker on the site's alias (so the companion) and on the semdup-created index, against the site's plain BM25
  search of the same query text (``multi_match`` on Title and Body, 100 hits, no ``_source``) as the baseline
  ratio; the in-place layout is tried too, and what today's Reranker answers there is printed;
* the site's own full reindex (``_reindex`` into a new index with the site's original mapping, then the alias moved
  by the site): what becomes of the in-place fields, and what ``plan_sync`` says of the companion afterwards;
* ``_cat/indices`` store size of each index, as written and after ``_forcemerge`` to one segment (partial updates
  leave deleted documents until a merge).

Example::

    python -m benchmarks.footprint --bundle artifacts/demo/default-minilm-travel --posts 1000
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.indexing import _hardware, _versions
from benchmarks.report import elapsed_ms, format_table, human_bytes, ratio, summary
from benchmarks.site_index import SITE_MAPPING, bulk_or_raise, make_site_index, site_posts
from semdup.core.posts import Post

logger = logging.getLogger(__name__)

# the old design's semdup object (24c9dcb, default search structures: packed fields only)
IN_PLACE_MAPPING: dict[str, Any] = {
    "properties": {
        "semdup": {"properties": {"model": {"type": "keyword"}, "packed": {"type": "binary", "doc_values": True}}}
    }
}
_SET_SEMDUP = "ctx._source.semdup = params.semdup"  # the old backfill_batch's script
_TIMEOUT = 300


class CachedEncoder:
    """A bundle whose ``document_fields`` answers from one earlier encoding of the same title and body, so the
    three writers pay the encoder once; a post not seen before is encoded (``misses`` counts them)."""

    def __init__(self, bundle: Any) -> None:
        self.bundle, self.version = bundle, bundle.version
        self._cache: dict[tuple[str, str], dict[str, Any]] = {}
        self.misses = 0

    def document_fields(self, posts: Sequence[Post]) -> list[dict[str, Any]]:
        todo = [p for p in posts if (p.title, p.body) not in self._cache]
        if todo:
            self.misses += len(todo)
            for p, f in zip(todo, self.bundle.document_fields(todo), strict=True):
                self._cache[p.title, p.body] = f
        return [self._cache[p.title, p.body] for p in posts]


def raw_search(client: Any, index: str, body: dict[str, Any]) -> tuple[int, list[str]]:
    """The byte size of a search response as it comes over the wire (uncompressed), and its hit ids."""
    conn = client.transport.get_connection()
    _status, _headers, raw = conn.perform_request("POST", f"/{index}/_search", body=json.dumps(body).encode())
    data = json.loads(raw)
    return len(raw.encode("utf-8")), [h["_id"] for h in data["hits"]["hits"]]


def store_bytes(client: Any, index: str) -> int:
    """``_cat/indices`` store size (primaries and replicas) of one index, in bytes."""
    client.indices.flush(index=index, request_timeout=_TIMEOUT)
    rows = client.cat.indices(index=index, format="json", bytes="b", h="index,store.size", request_timeout=_TIMEOUT)
    return sum(int(r["store.size"] or 0) for r in rows)


def fill_in_place(client: Any, name: str, posts: Sequence[Post], encoder: CachedEncoder) -> None:
    """The old design: the ``semdup`` object put into the site's mapping and written by partial updates."""
    from semdup.index_format.mapping import semdup_source

    client.indices.put_mapping(index=name, body=IN_PLACE_MAPPING, request_timeout=_TIMEOUT)
    actions = []
    for p, fields in zip(posts, encoder.document_fields(posts), strict=True):
        src = semdup_source(fields)  # {"model", "packed"}: the default index's packed fields
        script = {"source": _SET_SEMDUP, "lang": "painless", "params": {"semdup": src}}
        actions.append({"_op_type": "update", "_index": name, "_id": p.id, "script": script})
    bulk_or_raise(client, actions)
    client.indices.refresh(index=name)


def reindex_like_the_site(client: Any, old: str, new: str, alias: str | None = None) -> None:
    """The site's own full reindex: a new index with the site's original mapping, ``_reindex``, then (with
    ``alias``) the alias moved from the old index to the new one and the old one deleted."""
    client.indices.create(index=new, body={"mappings": SITE_MAPPING}, request_timeout=_TIMEOUT)
    client.reindex(body={"source": {"index": old}, "dest": {"index": new}}, refresh=True, request_timeout=_TIMEOUT)
    if alias is not None:
        actions = [{"remove": {"index": old, "alias": alias}}, {"add": {"index": new, "alias": alias}}]
        client.indices.update_aliases(body={"actions": actions}, request_timeout=_TIMEOUT)
        client.indices.delete(index=old, request_timeout=_TIMEOUT)


def describe_semdup_mapping(client: Any, index: str) -> str:
    """How ``semdup.*`` is mapped in ``index`` (``unmapped`` when nothing is), e.g. ``packed text+keyword``."""
    found = client.indices.get_mapping(index=index)
    props = next(iter(found.values()))["mappings"].get("properties", {})
    semdup = (props.get("semdup") or {}).get("properties") or {}
    if not semdup:
        return "unmapped"
    out = []
    for name, spec in sorted(semdup.items()):
        kind = spec.get("type", "object")
        subs = "+".join(s.get("type", "?") for s in (spec.get("fields") or {}).values())
        out.append(f"{name} {kind}{'+' + subs if subs else ''}")
    return ", ".join(out)


def packed_readable(client: Any, index: str) -> tuple[int, int]:
    """How many documents keep ``semdup.packed`` in ``_source``, and how many of them the reranker can read as
    binary doc values (what it asks the candidate search for)."""
    in_source = int(client.count(index=index, body={"query": {"exists": {"field": "semdup.packed"}}})["count"])
    try:
        resp = client.search(
            index=index,
            body={"size": 20, "_source": False, "docvalue_fields": ["semdup.packed"], "query": {"match_all": {}}},
        )
    except Exception as exc:  # the field is text now: doc values refused
        logger.info("docvalue_fields semdup.packed on %s: %s", index, exc)
        return in_source, 0
    readable = sum(1 for h in resp["hits"]["hits"] if (h.get("fields") or {}).get("semdup.packed"))
    return in_source, readable



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--bundle", required=True, help="model bundle directory or .tar.gz")
    parser.add_argument("--data", default=None, help="Stack Exchange dump folder (default: the Travel dump)")
    parser.add_argument("--posts", type=int, default=1000, help="posts in the site's index")
    parser.add_argument("--queries", type=int, default=100, help="held-out posts used as rerank queries")
    parser.add_argument("--rounds", type=int, default=1, help="passes over the queries (interleaved methods)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls of each method first")
    parser.add_argument("--k-candidates", type=int, default=100)
    parser.add_argument("--search", default="visa passport border", help="the site's own match query on Body")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    parser.add_argument("--keep", action="store_true", help="keep the indices (their names are printed)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("opensearch").setLevel(logging.ERROR)  # the expected 404 / 400 answers are reported below

    from semdup.apps.settings import load_settings
    from semdup.bundle.bundle import Bundle
    from semdup.indexer.batch_writer import index_batch
    from semdup.indexer.sync import sync_batch
    from semdup.ingest.lexical_index import create_index
    from semdup.ingest.reconcile import plan_sync
    from semdup.opensearch_io.bulk import chunked
    from semdup.opensearch_io.clients import connect
    from semdup.reranker import Reranker, RerankerSettings
    from semdup.search_templates import query_text
    from semdup.site_index.enable import enable_index

    every = site_posts(args.data)
    posts, queries = every[: args.posts], every[args.posts : args.posts + args.queries]
    bundle = Bundle.load(args.bundle, intra_op_threads=args.threads)
    encoder = CachedEncoder(bundle)
    client = connect(load_settings().opensearch_settings())
    stem = f"semdup-bench-footprint-{os.getpid()}"
    alias, site_v1, site_v2 = f"{stem}-site", f"{stem}-site-v1", f"{stem}-site-v2"
    in_place, in_place_v2, own = f"{stem}-inplace", f"{stem}-inplace-v2", f"{stem}-own"
    search = {"query": {"match": {"Body": args.search}}, "size": 50}
    load_before = os.getloadavg()

    try:
        t0 = time.monotonic()
        for n, batch in enumerate(chunked(posts, 64)):
            encoder.document_fields(batch)
            print(f"\rencoding {min((n + 1) * 64, len(posts))}/{len(posts)} posts", end="", file=sys.stderr)
        print(file=sys.stderr)
        encode_s = time.monotonic() - t0

        make_site_index(client, site_v1, posts)
        client.indices.put_alias(index=site_v1, name=alias)
        plain_bytes, plain_ids = raw_search(client, alias, search)

        make_site_index(client, in_place, posts)
        fill_in_place(client, in_place, posts, encoder)
        in_place_bytes, in_place_ids = raw_search(client, in_place, search)

        enabled = enable_index(
            client, alias, version=bundle.version, dimension=bundle.dimension, title_field="Title", body_field="Body"
        )
        for batch in chunked([p.id for p in posts], 64):
            result = sync_batch(client, enabled.companion, enabled.source, batch, encoder)
            if result.failed:
                raise RuntimeError(f"{len(result.failed)} posts failed to sync: {result.failed[:2]}")
        client.indices.refresh(index=enabled.companion)
        after_bytes, after_ids = raw_search(client, alias, search)

        create_index(client, own, dimension=bundle.dimension)
        for batch in chunked([p.to_json() for p in posts], 64):
            result = index_batch(client, own, batch, encoder)
            if result.failed:
                raise RuntimeError(f"{len(result.failed)} posts failed to index: {result.failed[:2]}")
        client.indices.refresh(index=own)

        # storage, as written (the in-place copy still holds the documents its partial updates replaced)
        names = {"plain": site_v1, "in-place": in_place, "companion": enabled.index, "own": own}
        store = {k: store_bytes(client, v) for k, v in names.items()}
        for v in names.values():
            client.indices.forcemerge(index=v, max_num_segments=1, request_timeout=_TIMEOUT)
        merged = {k: store_bytes(client, v) for k, v in names.items()}

        # rerank latency, interleaved query by query
        settings = RerankerSettings(k_candidates=args.k_candidates, search_timeout=30)
        rr_companion, rr_own = Reranker(bundle, client, alias, settings), Reranker(bundle, client, own, settings)
        try:
            got = Reranker(bundle, client, in_place, settings).rank(queries[0], k=10)
            in_place_rank = f"{len(got)} results"
        except Exception as exc:  # what today's code says of the old layout
            in_place_rank = f"{type(exc).__name__}: {str(exc)[:160]}"

        def bm25(post: Post) -> Callable[[], Any]:
            body = {
                "query": {"multi_match": {"query": query_text(post.title, post.body), "fields": ["Title", "Body"]}},
                "size": args.k_candidates,
                "_source": False,
            }
            return lambda: client.search(index=alias, body=body, request_timeout=30)

        methods: dict[str, Callable[[Post], Callable[[], Any]]] = {
            "bm25": bm25,
            "companion": lambda post: lambda: rr_companion.rank(post, k=10),
            "own": lambda post: lambda: rr_own.rank(post, k=10),
        }
        for make in methods.values():
            for post in queries[: args.warmup]:
                make(post)()
        times: dict[str, list[float]] = {name: [] for name in methods}
        for _ in range(args.rounds):
            for post in queries:
                for name, make in methods.items():
                    times[name].append(elapsed_ms(make(post)))
        lat = {name: summary(t) for name, t in times.items()}
        answers_before = {q.id: [c.id for c in rr_companion.rank(q, k=10)] for q in queries[:20]}

        # the site's own full reindex
        reindex_like_the_site(client, in_place, in_place_v2)
        in_place_mapping = describe_semdup_mapping(client, in_place_v2)
        in_source, readable = packed_readable(client, in_place_v2)
        in_place_v2_store = store_bytes(client, in_place_v2)
        reindex_like_the_site(client, site_v1, site_v2, alias)
        plan = plan_sync(client, alias, bundle.version)
        answers_after = {
            q.id: [c.id for c in Reranker(bundle, client, alias, settings).rank(q, k=10)] for q in queries[:20]
        }
        same_answers = sum(answers_before[q] == answers_after[q] for q in answers_before)
    finally:
        if args.keep:
            print(f"kept indices {stem}-*", file=sys.stderr)
        else:
            client.indices.delete(index=f"{stem}-*", ignore_unavailable=True, request_timeout=_TIMEOUT)
    load_after = os.getloadavg()

    module = __spec__.name if __spec__ else __name__
    print(f"command:   python -m {module} {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"hardware:  {_hardware()} (shared with other work)")
    print(f"load avg:  {load_before[0]:.2f} before, {load_after[0]:.2f} after (1 min)")
    print(f"versions:  {_versions()}; OpenSearch {client.info()['version']['number']}")
    print(f"bundle:    {bundle.version} (dimension {bundle.dimension}); onnx threads {args.threads}")
    print(
        f"posts:     {len(posts)} in the site's index (1 shard, site mapping); {len(queries)} held-out queries x "
        f"{args.rounds} round(s), {args.warmup} warm-up each; encoded once in {encode_s:.0f} s, "
        f"{encoder.misses - len(posts)} posts encoded again by the writers"
    )
    print(
        f"site search: match Body {args.search!r}, size 50, default _source; rerank k_candidates {args.k_candidates}"
    )
    print()

    def same(ids: list[str]) -> str:
        if ids == plain_ids:
            return "yes"
        if set(ids) == set(plain_ids):
            return "same ids, other order"
        return f"no ({len(set(ids) & set(plain_ids))}/{len(plain_ids)} shared)"

    def kib(n: int) -> str:
        return f"{human_bytes(n)} ({n})"

    b = lat["bm25"]
    rows = [
        ["site search response, 50 hits", kib(plain_bytes), kib(in_place_bytes), kib(after_bytes), "-"],
        ["  bytes / plain", "1.00x", ratio(in_place_bytes, plain_bytes), ratio(after_bytes, plain_bytes), "-"],
        ["  same hits as plain", "-", same(in_place_ids), same(after_ids), "-"],
        [
            "rerank p50 / p99 ms (100 cand.)",
            f"bm25 {b['p50']:.1f} / {b['p99']:.1f}",
            "not rerankable",
            f"{lat['companion']['p50']:.1f} / {lat['companion']['p99']:.1f}",
            f"{lat['own']['p50']:.1f} / {lat['own']['p99']:.1f}",
        ],
        [
            "  p50 / p99 vs site bm25",
            "1.00x / 1.00x",
            "-",
            f"{ratio(lat['companion']['p50'], b['p50'])} / {ratio(lat['companion']['p99'], b['p99'])}",
            f"{ratio(lat['own']['p50'], b['p50'])} / {ratio(lat['own']['p99'], b['p99'])}",
        ],
        [
            "after the site's _reindex",
            "-",
            f"semdup: {in_place_mapping}",
            f"plan_sync: {len(plan.stale)} stale",
            "-",
        ],
        [
            "store size as written",
            kib(store["plain"]),
            kib(store["in-place"]),
            kib(store["companion"]),
            kib(store["own"]),
        ],
        [
            "store size, 1 segment",
            kib(merged["plain"]),
            kib(merged["in-place"]),
            kib(merged["companion"]),
            kib(merged["own"]),
        ],
        [
            "  / plain (1 segment)",
            "1.00x",
            ratio(merged["in-place"], merged["plain"]),
            ratio(merged["plain"] + merged["companion"], merged["plain"]) + " (site+companion)",
            "-",
        ],
    ]
    headers = ["", "plain site", "in-place (old)", "companion (today)", "semdup-created"]
    print(format_table(headers, rows))
    print()
    print(f"in-place, rerank by today's Reranker: {in_place_rank}")
    print(
        f"in-place after the site's _reindex (original mapping, dynamic on): semdup.packed in _source of {in_source}/"
        f"{len(posts)} documents, mapped as '{in_place_mapping}'; binary doc values readable in {readable} of 20 "
        f"sampled hits; store {kib(in_place_v2_store)} (before the reindex, 1 segment: {kib(merged['in-place'])})"
    )
    print(
        f"companion after the site's _reindex (alias moved, old index deleted): plan_sync {len(plan.stale)} stale, "
        f"{len(plan.deleted)} deleted, {plan.current} current; rerank top-10 unchanged for {same_answers}/"
        f"{len(answers_before)} queries"
    )
    print(
        f"rerank calls: bm25 n {b['n']}, companion n {lat['companion']['n']}, own n {lat['own']['n']}; "
        f"mean ms bm25 {b['mean']:.1f}, companion {lat['companion']['mean']:.1f}, own {lat['own']['mean']:.1f}"
    )
    return 0


if __name__ == "__main__":
    from benchmarks import run_main

    run_main(main)
