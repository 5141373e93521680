"""Title-only quality of ``/v1/similar`` on Travel: the asker has typed a title, nothing else.

    python -m benchmarks.similar_eval --bundle artifacts/demo/default-minilm-travel \\
        --vectors artifacts/demo/cache/dense-3602748718d84b07.npy \\
        --titles artifacts/demo/cache/dense-f9d2a03a8b4fcb7c.npy

Protocol: the Travel Stack Exchange protocol (``semdup eval stackexchange``: every post indexed, each query
searches all posts but itself, Acc@1/5/10, MAP and MRR over the top 100,
:func:`semdup.measures.ranking.retrieval_scores`),
with the query's title as the only text. Contenders:

* ``bm25-title``: the stored template ``semdup-bm25-title`` (the title against the posts' titles), top 100;
* ``bm25-text``: the stored template ``semdup-bm25-text`` (the title against title + body), top 100;
* ``similar``: :class:`semdup.reranker.similar.TitleSearch`, the service's own path (one title encoding, one
  ``_msearch`` of :data:`~semdup.reranker.similar.CANDIDATES` BM25 and k-NN hits, fused): its answer holds at most
  2 × CANDIDATES posts, so MAP counts every relevant post beyond them as missed.

The fusion weights are chosen on dev (grid :data:`GRID`, by MAP, ties to the earlier point), then test is run
once with them. The corpus's vectors may come from ``.npy`` tables (:mod:`benchmarks.similar_index`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from semdup.core import progress as progress_bar
from semdup.measures.fitting import grid_search
from semdup.measures.ranking import retrieval_scores
from semdup.reranker.similar import CANDIDATES, SIMILAR_FUSION, TitleSearch

__all__ = ["GRID", "TOP", "title_runs", "choose_fusion", "run", "print_result", "main"]

logger = logging.getLogger(__name__)

TOP = 100
GRID: dict[str, tuple[float, ...]] = {
    "beta_title": (0.0, 0.25, 0.5, 1.0),
    "beta_dense": (0.0, 0.25, 0.5, 1.0),
    "beta_bow": (0.0, 0.1, 0.25, 0.5),
    "alpha": (0.0, 0.1, 0.25, 0.5, 1.0, 2.0),
}


def _grid() -> list[dict[str, float]]:
    names = list(GRID)
    points = [dict(zip(names, values, strict=True)) for values in itertools.product(*GRID.values())]
    return [p for p in points if any(p.values())]


def title_runs(search: TitleSearch, index: str, queries: Sequence[Any], *, progress: bool) -> list[tuple[str, Any]]:
    """Per query (id, (candidates, components)): the service's candidates of the query's title, itself excluded."""
    out = []
    for q in progress_bar.progress(queries, desc="similar titles", enabled=progress):
        cands, vector, terms = search.candidates_of(q.post.title, index, exclude_id=q.post.id)
        out.append((q.post.id, (cands, search.components(cands, vector, terms))))
    return out


def _ranked(search: TitleSearch, runs: Sequence[tuple[str, Any]], fusion: Mapping[str, float]) -> dict[str, list[str]]:
    return {qid: [p.id for p in search.rank(c, comps, TOP, fusion)] for qid, (c, comps) in runs}


def choose_fusion(
    search: TitleSearch, runs: Sequence[tuple[str, Any]], relevant: Mapping[str, set[str]]
) -> tuple[dict[str, float], dict[str, float]]:
    """(weights, dev scores) of the grid point with the best dev MAP (:func:`semdup.measures.fitting.grid_search`: the
    earliest of the best, a later point must be better by more than 1e-9)."""
    fit = grid_search(_grid(), lambda ranked: retrieval_scores(ranked, relevant, cutoff=TOP),
                      run=lambda point: _ranked(search, runs, point), metric="MAP", tolerance=1e-9)
    return fit.point, fit.figures


def _bm25(client: Any, index: str, queries: Sequence[Any], variant: str) -> dict[str, list[str]]:
    from semdup.search_templates import msearch_templates, query_text, template_id, template_params

    requests = [
        (template_id("bm25", variant), template_params(query_text(q.post.title), size=TOP, exclude_id=q.post.id))
        for q in queries
    ]
    hits = msearch_templates(client, index, requests)
    return {q.post.id: [h.id for h in qh] for q, qh in zip(queries, hits, strict=True)}


def run(
    client: Any,
    bundle_path: str,
    *,
    vectors: str | None,
    titles: str | None,
    index: str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Dev choice and test figures (percent); ``index``: an existing index of the Travel posts (else a fresh one)."""
    from contextlib import nullcontext

    from benchmarks.similar_index import similar_index
    from semdup.bundle.bundle import Bundle
    from semdup.data.paths import travel_dir
    from semdup.data.stackexchange import load_stackexchange_dump
    from semdup.reranker.reranker import Reranker

    start = time.monotonic()
    bundle = Bundle.load(bundle_path)
    dump = load_stackexchange_dump(travel_dir())
    splits = {s: dump.queries(s) for s in ("dev", "test")}
    made = (
        nullcontext(index)
        if index
        else similar_index(
            client,
            bundle,
            dump.corpus(),
            vectors=vectors,
            titles=titles,
            name="semdup-similar-eval",
            progress=progress,
        )
    )
    out: dict[str, Any] = {"model": bundle.version, "candidates_per_path": CANDIDATES, "top": TOP}
    with made as name:
        search = TitleSearch(Reranker(bundle, client, name))
        relevant = {s: {q.post.id: set(q.relevant) for q in qs} for s, qs in splits.items()}
        dev_runs = title_runs(search, name, splits["dev"], progress=progress)
        fusion, dev = choose_fusion(search, dev_runs, relevant["dev"])
        out["fusion"], out["dev"] = fusion, {"similar": dev}
        out["dev"]["similar (module default)"] = retrieval_scores(
            _ranked(search, dev_runs, SIMILAR_FUSION), relevant["dev"], cutoff=TOP
        )
        test_runs = title_runs(search, name, splits["test"], progress=progress)
        out["test"] = {"similar": retrieval_scores(_ranked(search, test_runs, fusion), relevant["test"], cutoff=TOP)}
        for split, qs in splits.items():
            for variant in ("title", "text"):
                ranked = _bm25(client, name, qs, variant)
                out[split][f"bm25-{variant}"] = retrieval_scores(ranked, relevant[split], cutoff=TOP)
    out["seconds"] = time.monotonic() - start
    return out


def print_result(result: Mapping[str, Any]) -> None:
    print(f"model {result['model']}; {result['candidates_per_path']} candidates per path; MAP over the top {TOP}")
    print(f"fusion chosen on dev: {json.dumps(result['fusion'])}")
    print(f"{'split':<6}{'method':<26}{'Acc@1':>7}{'Acc@5':>7}{'Acc@10':>7}{'MAP':>7}{'MRR':>7}{'n':>5}")
    for split in ("dev", "test"):
        for method, m in result[split].items():
            print(
                f"{split:<6}{method:<26}{m['Acc@1']:>7.2f}{m['Acc@5']:>7.2f}{m['Acc@10']:>7.2f}{m['MAP']:>7.2f}"
                f"{m['MRR']:>7.2f}{m['n_queries']:>5}"
            )
    print(f"{result['seconds']:.0f} s")


def main(argv: list[str] | None = None) -> int:
    from semdup.apps.settings import load_settings
    from semdup.core.settings import OpenSearchSettings
    from semdup.opensearch_io.clients import connect

    ap = argparse.ArgumentParser(prog="python -m benchmarks.similar_eval", description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", required=True, help="the model bundle (its fusion must have a title term)")
    ap.add_argument("--vectors", help="the corpus's dense vectors, .npy in Posts.xml order (checked on a sample)")
    ap.add_argument("--titles", help="the corpus's title vectors, .npy in Posts.xml order (checked on a sample)")
    ap.add_argument("--opensearch", help="OpenSearch URL (default: the settings')")
    ap.add_argument("--index", help="an existing index of every Travel post with this bundle's fields")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    settings = OpenSearchSettings(url=args.opensearch) if args.opensearch else load_settings().opensearch_settings()
    result = run(
        connect(settings),
        args.bundle,
        vectors=args.vectors,
        titles=args.titles,
        index=args.index,
        progress=sys.stderr.isatty(),
    )
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_result(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
