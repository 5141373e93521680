"""Does a ranking depend on the shard count (issue #41)? Dev MAP on a 1-shard and a 3-shard index, and what
``dfs_query_then_fetch`` costs the ``_msearch``.

BM25 scores each document with its own shard's statistics (document frequencies, average length), so on an index
of several primary shards the lexical candidates, T-SCQA's lexnorm and so the fused ranking move with how the
posts fell on the shards. ``RerankerSettings.dfs`` (on by default where the index has more than one primary
shard) asks the shards for their statistics first. This runs the service's own reranker over dev three ways:

* ``1 shard``: the index as ``semdup index-posts`` creates it (dfs is off on one shard: nothing to gather);
* ``3 shards``: the same posts on three primary shards, plain ``query_then_fetch`` (``dfs=False``);
* ``3 shards + dfs``: the same three-shard index, the default (``dfs`` auto: on).

Each with the bundle's own fusion and with BM25 alone (the lexnorm term only: the ranking that depends on the
statistics most), and on Travel the bundle's fusion over BM25 candidates alone (no k-NN), with the overlap of each
candidate source's posts with the 1-shard index's: k-NN candidates come from each shard's own HNSW graph, an
approximate search that no statistics change. Travel dev: BM25 ∪ k-NN candidates (100 each, as the demo), MAP
over the 100; SemEval-2016 dev:
each question's ten candidates, official MAP. The three conditions run query by query in rotating order, so the
machine's load falls on each alike; the Travel ``_msearch`` times (``--repeat`` passes over dev) give the latency
of dfs on three shards against plain on three shards and one shard.

Pass the bundles the demo fits (``semdup demo`` builds ``artifacts/demo/default-minilm-travel`` and
``-semeval``; docs/results.md, "Shard count", gives the ``semdup export`` / ``fit-default`` commands that build
them alone); ``--tiny DIR`` instead fits the default the same way (``semdup fit-default``) on a tiny 16-dimension
word-level encoder (``tests/tiny_onnx.py``), a quick check that needs no MiniLM package: its dense cosine is
nearly noise, so its k-NN candidates are near-ties, which is where the approximate per-shard HNSW search moves
them most.

    python -m experiments.shard_count --travel artifacts/demo/default-minilm-travel \\
        --semeval artifacts/demo/default-minilm-semeval
    python -m experiments.shard_count --tiny /tmp/shard-count      # the tiny encoder instead
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

CONDITIONS = ("1 shard", "3 shards", "3 shards + dfs")
LEXICAL_ALONE = {"beta_bow": 0.0, "beta_dense": 0.0, "alpha": 1.0}  # lexnorm alone: the BM25 order
WITHIN = 0.1  # MAP points the three-shard ranking may differ from the one-shard one


def _rerankers(bundle: Any, client: Any, one: str, many: str, fusion: dict[str, float] | None, **settings: Any
               ) -> dict[str, Any]:  # fmt: skip
    from semdup.core.scoring import check_fusion
    from semdup.reranker import Reranker, RerankerSettings

    out = {
        "1 shard": Reranker(bundle, client, one, RerankerSettings(**settings)),
        "3 shards": Reranker(bundle, client, many, RerankerSettings(dfs=False, **settings)),
        "3 shards + dfs": Reranker(bundle, client, many, RerankerSettings(**settings)),  # dfs auto: on
    }
    if fusion is not None:
        for rr in out.values():
            rr.fusion = check_fusion(fusion)
    return out


def _timed_search() -> tuple[list[float], Any]:
    """Wrap the reranker's ``search`` (its one ``_msearch``) to record its wall time in ms."""
    import semdup.reranker.reranker as reranker_module

    timed: list[float] = []
    search = reranker_module.search

    def timed_search(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return search(*args, **kwargs)
        finally:
            timed.append((time.perf_counter() - t0) * 1000)

    reranker_module.search = timed_search
    return timed, lambda: setattr(reranker_module, "search", search)


def _travel(client: Any, bundle_path: str, shards: int, repeat: int) -> dict[str, Any]:
    from semdup.bundle.bundle import Bundle
    from semdup.opensearch_io.clients import knn_available
    from semdup.measures.ranking import retrieval_scores
    from semdup.data.paths import travel_dir
    from semdup.data.stackexchange import load_stackexchange_dump
    from semdup.evaluation.through_reranker import semantic_index
    from semdup.index_format.layout import Shape
    from semdup.index_format.schema import CandidateFields

    dump = load_stackexchange_dump(travel_dir())
    queries = dump.queries("dev")
    relevant = {q.post.id: set(q.relevant) for q in queries}
    bundle = Bundle.load(bundle_path)
    knn = bundle.dimension is not None and knn_available(client)
    fields = CandidateFields(False, knn)
    out: dict[str, Any] = {"knn": knn, "queries": len(queries)}
    with semantic_index(client, bundle, dump.corpus(), "shards-1", progress=False, search=fields,
                        shape=Shape(1, 0)) as one, \
         semantic_index(client, bundle, dump.corpus(), f"shards-{shards}", progress=False, search=fields,
                        shape=Shape(shards, 0)) as many:  # fmt: skip
        variants = (("bundle fusion", None, knn), ("BM25 alone", LEXICAL_ALONE, knn),
                    ("bundle fusion, BM25 candidates only", None, False))  # fmt: skip
        for name, fusion, with_knn in variants:
            rrs = _rerankers(bundle, client, one, many, fusion, knn=with_knn, search_timeout=30)
            ranked: dict[str, dict[str, list[str]]] = {c: {} for c in CONDITIONS}
            for i, q in enumerate(queries):
                for c in CONDITIONS[i % 3:] + CONDITIONS[: i % 3]:
                    ranked[c][q.post.id] = [x.id for x in rrs[c].rank(q.post, k=100, exclude_id=q.post.id)]
            out[name] = {c: round(retrieval_scores(ranked[c], relevant, cutoff=100)["MAP"], 2) for c in CONDITIONS}
        rrs = _rerankers(bundle, client, one, many, None, knn=knn, search_timeout=30)
        out["candidate overlap with 1 shard"] = _overlap(rrs, queries)
        timed, restore = _timed_search()
        try:
            for q in queries[:10]:  # warm up
                for c in CONDITIONS:
                    rrs[c].rank(q.post, k=100, exclude_id=q.post.id)
            ms: dict[str, list[float]] = {c: [] for c in CONDITIONS}
            for i in range(repeat * len(queries)):
                q = queries[i % len(queries)]
                for c in CONDITIONS[i % 3:] + CONDITIONS[: i % 3]:
                    timed.clear()
                    rrs[c].rank(q.post, k=100, exclude_id=q.post.id)
                    ms[c].append(timed[0])
        finally:
            restore()
        out["msearch_ms"] = {c: {"p50": round(float(np.percentile(v, 50)), 1),
                                 "p99": round(float(np.percentile(v, 99)), 1), "n": len(v)}
                             for c, v in ms.items()}  # fmt: skip
    return out


def _overlap(rrs: dict[str, Any], queries: list[Any]) -> dict[str, dict[str, float]]:
    """Per condition and candidate source: the mean Jaccard overlap of its candidates with the 1-shard index's
    (1.0: the same posts). BM25's move with per-shard statistics; k-NN's with each shard's own HNSW graph."""
    sums: dict[str, dict[str, list[float]]] = {c: {} for c in CONDITIONS[1:]}
    for q in queries:
        found = {}
        for c in CONDITIONS:
            cands, _ = rrs[c].retrieve(q.post, exclude_id=q.post.id)
            found[c] = {src: {i for i, s in cands.sources.items() if src in s}
                        for src in {x for s in cands.sources.values() for x in s}}  # fmt: skip
        for c in CONDITIONS[1:]:
            for src, ids in found["1 shard"].items():
                other = found[c].get(src, set())
                sums[c].setdefault(src, []).append(len(ids & other) / max(len(ids | other), 1))
    return {c: {src: round(float(np.mean(v)), 4) for src, v in by.items()} for c, by in sums.items()}


def _semeval(client: Any, bundle_path: str, shards: int) -> dict[str, Any]:
    from semdup.bundle.bundle import Bundle
    from semdup.measures.ranking import complete_scores, semeval_scores
    from semdup.data.paths import semeval_files
    from semdup.data.semeval import load_semeval_xml
    from semdup.evaluation.through_reranker import semantic_index
    from semdup.index_format.layout import Shape
    from semdup.index_format.schema import CandidateFields

    sem = load_semeval_xml(*semeval_files("dev"), name="dev")
    bundle = Bundle.load(bundle_path)
    out: dict[str, Any] = {"questions": len(sem.questions)}
    posts = sem.related_posts()
    with semantic_index(client, bundle, posts, "sem-shards-1", progress=False, search=CandidateFields(),
                        shape=Shape(1, 0)) as one, \
         semantic_index(client, bundle, posts, f"sem-shards-{shards}", progress=False, search=CandidateFields(),
                        shape=Shape(shards, 0)) as many:  # fmt: skip
        for name, fusion in (("bundle fusion", None), ("BM25 alone", LEXICAL_ALONE)):
            rrs = _rerankers(bundle, client, one, many, fusion, k_candidates=10, knn=False)
            preds: dict[str, dict[str, dict[str, float]]] = {c: {} for c in CONDITIONS}
            for i, q in enumerate(sem.questions):
                ids = [r.post.id for r in q.related]
                for c in CONDITIONS[i % 3:] + CONDITIONS[: i % 3]:
                    ranked = {x.id: x.score for x in rrs[c].rank(q.post, k=len(ids), restrict_ids=ids)}
                    preds[c][q.post.id] = complete_scores(ranked, ids)  # as `semdup eval semeval`
            out[name] = {c: round(semeval_scores(preds[c], sem.gold())["MAP"], 2) for c in CONDITIONS}
    return out


def _tiny_defaults(workdir: Path) -> tuple[str, str]:
    """The tiny base encoder's bundle and a default fitted on it per data set, as ``semdup demo`` fits its own."""
    from semdup.data.paths import semeval_files
    from semdup.data.posts_input import read_posts
    from semdup.learn.default_bundle import fit_default

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from tiny_onnx import tiny_wordpiece_bundle  # type: ignore[import-not-found]

    base = workdir / "tiny-base"
    if not (base / "manifest.json").exists():
        tiny_wordpiece_bundle(base)
    out = []
    for data in ("travel", "semeval"):
        bundle = workdir / f"default-tiny-{data}"
        if not (bundle / "manifest.json").exists():
            corpus = read_posts(semeval_files("test")[0]) if data == "semeval" else ()  # as `semdup demo` passes it
            fit_default(base, data, bundle, corpus=corpus, cache_dir=workdir / "cache")
        out.append(str(bundle))
    return out[0], out[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--travel", help="the Travel default bundle")
    ap.add_argument("--semeval", help="the SemEval default bundle")
    ap.add_argument("--tiny", type=Path, help="instead: fit tiny defaults in this folder (no MiniLM package needed)")
    ap.add_argument("--shards", type=int, default=3, help="primary shards of the many-shard index")
    ap.add_argument("--repeat", type=int, default=3, help="passes over Travel dev for the _msearch times")
    ap.add_argument("--opensearch", default=None, help="an OpenSearch URL with k-NN (default: a throwaway node)")
    args = ap.parse_args(argv)
    if args.tiny:
        args.travel, args.semeval = _tiny_defaults(args.tiny)
    if not (args.travel and args.semeval):
        ap.error("give --travel and --semeval bundles, or --tiny DIR")
    from semdup.opensearch_io.clients import connect
    from semdup.core.settings import OpenSearchSettings
    from semdup.devstack.local_opensearch import own_opensearch

    with own_opensearch(args.opensearch, name="shard-count") as url:
        client = connect(OpenSearchSettings(url=url, timeout=60), check=False)
        result = {"bundles": {"travel": args.travel, "semeval": args.semeval},
                  "travel dev": _travel(client, args.travel, args.shards, args.repeat),
                  "semeval dev": _semeval(client, args.semeval, args.shards)}  # fmt: skip
    print(json.dumps(result, indent=1))
    ok = all(abs(r[f]["3 shards + dfs"] - r[f]["1 shard"]) <= WITHIN
             for r in (result["travel dev"], result["semeval dev"])
             for f in ("bundle fusion", "BM25 alone"))  # fmt: skip
    print(f"3 shards + dfs within {WITHIN} MAP of 1 shard on every dev set and fusion: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
