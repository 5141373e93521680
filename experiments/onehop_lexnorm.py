"""Issue #42's hard part, measured before it is built: which lexnorm can one cluster-side query compute?

Today ``/v1/rerank`` scores s = β_bow·cos_bow + β_dense·cos_dense + α·lexnorm + β_title·cos_title, where lexnorm is
the min-max of BM25 over the whole candidate list (BM25's top k ∪ k-NN's top k, each k-NN candidate with its own
BM25 score, 0 where it matches no term). One query run by the node cannot see that list while it scores a
document. This reranks the same candidates with the lexnorms a one-hop query could compute instead:

* ``today``: the min-max over the union (the reference: it must give the service's own MAP);
* ``bm25 / max``: BM25 over the best BM25 score, i.e. a min-max with its lower bound at 0. Equal to today's
  wherever the union holds a post that matches no query term (``min 0``: the share of queries is printed);
* ``hybrid min-max``: neural-search's ``hybrid`` query with ``min_max`` normalization: BM25 normalized over its
  own top k only (0 for a post it did not return), and the semantic part (the stored fusion's cosines, one
  sub-query) normalized over the k-NN top k, then ``w·lex + (1 − w)·sem``, ``w`` chosen on train;
* ``saturating``: BM25 / (BM25 + c), a per-document transform any query can compute, ``c`` and ``α`` chosen on
  train.

Travel: the bundle's own fusion (fitted on train by ``semdup fit-default``), every choice on the train split, the
figures on dev (MAP over the top 100, as the demo). SemEval-2016 dev: each question's ten candidates (BM25 only),
the parameter-free variants. Pass the bundles ``semdup demo`` builds::

    python -m experiments.onehop_lexnorm --travel artifacts/demo/default-minilm-travel \\
        --semeval artifacts/demo/default-minilm-semeval
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

SATURATION_C = (0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 12.0, 20.0, 30.0, 50.0, 100.0, 200.0, 400.0)  # BM25 units
ALPHA_SCALE = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0)  # times the bundle's alpha
HYBRID_W = (0.005, 0.01, 0.02, 0.03, 0.04) + tuple(round(0.05 * i, 2) for i in range(1, 20))


@dataclass(frozen=True)
class QueryCandidates:
    """One query's candidates: ids, raw BM25 (0 = no match), the semantic part of the fusion, and which source
    (BM25's top k, k-NN's top k) returned each."""

    ids: list[str]
    lexical: np.ndarray
    semantic: np.ndarray
    in_bm25: np.ndarray
    in_knn: np.ndarray


def minmax(x: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Min-max of ``x`` over ``mask`` (all when None), 0 outside it and where the scores are all equal."""
    m = np.ones(len(x), dtype=bool) if mask is None else mask
    out = np.zeros(len(x))
    if m.any():
        lo, hi = float(x[m].min()), float(x[m].max())
        if hi - lo > 1e-12:
            out[m] = (x[m] - lo) / (hi - lo)
    return out


def lexnorms(c: QueryCandidates, saturation: float) -> dict[str, np.ndarray]:
    """The per-candidate lexical term of each variant that adds α·lexnorm to the semantic part."""
    top = float(c.lexical.max()) if len(c.lexical) else 0.0
    return {
        "today": minmax(c.lexical),
        "bm25 / max": c.lexical / top if top > 1e-12 else np.zeros(len(c.lexical)),
        "saturating": c.lexical / (c.lexical + saturation),
    }


def hybrid_scores(c: QueryCandidates, w: float) -> np.ndarray:
    """neural-search's hybrid with min_max and arithmetic_mean weights (w, 1 − w): each sub-query normalized over
    the posts it returned, 0 for the others."""
    return w * minmax(c.lexical, c.in_bm25) + (1.0 - w) * minmax(c.semantic, c.in_knn)


def ranked(c: QueryCandidates, scores: np.ndarray, k: int = 100) -> list[str]:
    """Best first, ties by id (as the reranker breaks them)."""
    return [c.ids[i] for i in sorted(range(len(c.ids)), key=lambda i: (-scores[i], c.ids[i]))[:k]]


def _collect(rr: Any, queries: Sequence[Any], restrict: bool = False) -> list[QueryCandidates]:
    """The reranker's own candidates and components for each query (:meth:`Reranker.fusion_inputs`, what its
    ``rank`` fuses)."""
    f = rr.fusion
    out = []
    for q in queries:
        ids_in = [r.post.id for r in q.related] if restrict else None
        found = rr.fusion_inputs(q.post, exclude_id=None if restrict else q.post.id, restrict_ids=ids_in)
        ids = [] if found is None else found.ids
        sem, lex = np.zeros(len(ids)), np.zeros(len(ids))
        srcs: list[Sequence[str]] = []
        if found is not None:
            lex = found.components["lexical"]
            for name, weight in (("cos_bow", f["beta_bow"]), ("cos_dense", f["beta_dense"]),
                                 ("cos_title", f.get("beta_title", 0.0))):  # fmt: skip
                if weight:
                    sem += weight * np.nan_to_num(found.components[name])
            srcs = [found.candidates.sources.get(i, ()) for i in ids]
        out.append(QueryCandidates(list(ids), np.asarray(lex, dtype=np.float64), sem,
                                   np.asarray([rr.settings.templates[0] in x for x in srcs], dtype=bool),
                                   np.asarray(["knn" in x for x in srcs], dtype=bool)))  # fmt: skip
    return out


def _travel_map(cands: list[QueryCandidates], queries: Sequence[Any], score: Any) -> float:
    from semdup.measures.ranking import retrieval_scores

    rel = {q.post.id: set(q.relevant) for q in queries}
    run = {q.post.id: ranked(c, score(c)) for q, c in zip(queries, cands, strict=True)}
    return round(retrieval_scores(run, rel, cutoff=100)["MAP"], 2)


def _travel(client: Any, bundle_path: str) -> dict[str, Any]:
    from semdup.bundle.bundle import Bundle
    from semdup.data.paths import travel_dir
    from semdup.data.stackexchange import load_stackexchange_dump
    from semdup.evaluation.through_reranker import semantic_index
    from semdup.index_format.schema import CandidateFields
    from semdup.measures.ranking import retrieval_scores
    from semdup.reranker import Reranker, RerankerSettings

    dump = load_stackexchange_dump(travel_dir())
    bundle = Bundle.load(bundle_path)
    train, dev = dump.queries("train"), dump.queries("dev")
    with semantic_index(client, bundle, dump.corpus(), "onehop", progress=False,
                        search=CandidateFields(False, True)) as index:  # BM25 ∪ k-NN, as the demo
        rr = Reranker(bundle, client, index, RerankerSettings(knn=True, search_timeout=30))
        service = {q.post.id: [x.id for x in rr.rank(q.post, k=100, exclude_id=q.post.id)] for q in dev}
        service_map = round(retrieval_scores(service, {q.post.id: set(q.relevant) for q in dev}, 100)["MAP"], 2)
        c_train, c_dev = _collect(rr, train), _collect(rr, dev)
    alpha = rr.fusion["alpha"]
    out: dict[str, Any] = {"queries": {"train": len(train), "dev": len(dev)}, "alpha": alpha,
                           "service /v1/rerank dev MAP": service_map,
                           "share of dev queries whose union has a BM25 0": round(float(np.mean(
                               [c.lexical.min() <= 0.0 for c in c_dev if len(c.ids)])), 3)}  # fmt: skip
    for name in ("today", "bm25 / max"):
        out[name] = _travel_map(c_dev, dev, lambda c, n=name: c.semantic + alpha * lexnorms(c, 1.0)[n])
    grid = {(cs, a): _travel_map(c_train, train, lambda c, cs=cs, a=a: c.semantic + a * alpha * lexnorms(c, cs)
                                 ["saturating"]) for cs in SATURATION_C for a in ALPHA_SCALE}  # fmt: skip
    (cs, a), best = max(grid.items(), key=lambda kv: (kv[1], -kv[0][0]))
    edge = cs in (SATURATION_C[0], SATURATION_C[-1]) or a in (ALPHA_SCALE[0], ALPHA_SCALE[-1])
    out["saturating"] = {"c": cs, "alpha": round(a * alpha, 4), "train MAP": best, "at a grid edge": edge,
                         "dev MAP": _travel_map(c_dev, dev, lambda c: c.semantic + a * alpha *
                                                lexnorms(c, cs)["saturating"])}  # fmt: skip
    hw = {w: _travel_map(c_train, train, lambda c, w=w: hybrid_scores(c, w)) for w in HYBRID_W}
    w, best = max(hw.items(), key=lambda kv: (kv[1], -kv[0]))
    out["hybrid min-max"] = {"w": w, "train MAP": best, "at a grid edge": w in (HYBRID_W[0], HYBRID_W[-1]),
                             "dev MAP": _travel_map(c_dev, dev, lambda c: hybrid_scores(c, w))}  # fmt: skip
    return out


def _semeval(client: Any, bundle_path: str) -> dict[str, Any]:
    from semdup.bundle.bundle import Bundle
    from semdup.data.paths import semeval_files
    from semdup.data.semeval import load_semeval_xml
    from semdup.evaluation.through_reranker import semantic_index
    from semdup.index_format.schema import CandidateFields
    from semdup.measures.ranking import complete_scores, semeval_scores
    from semdup.reranker import Reranker, RerankerSettings

    sem = load_semeval_xml(*semeval_files("dev"), name="dev")
    bundle = Bundle.load(bundle_path)
    with semantic_index(client, bundle, sem.related_posts(), "onehop-sem", progress=False,
                        search=CandidateFields()) as index:  # fmt: skip
        rr = Reranker(bundle, client, index, RerankerSettings(k_candidates=10, knn=False, search_timeout=30))
        cands = _collect(rr, sem.questions, restrict=True)
    alpha = rr.fusion["alpha"]
    out: dict[str, Any] = {"questions": len(sem.questions), "alpha": alpha}
    for name in ("today", "bm25 / max"):
        preds = {}
        for q, c in zip(sem.questions, cands, strict=True):
            s = c.semantic + alpha * lexnorms(c, 1.0)[name]
            preds[q.post.id] = complete_scores(dict(zip(c.ids, s.tolist(), strict=True)),
                                               [r.post.id for r in q.related])
        out[name] = round(semeval_scores(preds, sem.gold())["MAP"], 2)
    return out


def run_dev_sets(argv: list[str] | None, doc: str, name: str, travel: Callable[[Any, str], dict[str, Any]],
                 semeval: Callable[[Any, str], dict[str, Any]], keys: tuple[str, str]) -> int:
    """The command line of issue #42's dev experiments: the Travel and SemEval default bundles, measured by
    ``travel`` and ``semeval`` (each given a client and its bundle) on a node with k-NN (``--opensearch``, else a
    throwaway one named ``name``), their figures printed as JSON under ``keys``."""
    ap = argparse.ArgumentParser(description=doc.split("\n", 1)[0])
    ap.add_argument("--travel", required=True, help="the Travel default bundle")
    ap.add_argument("--semeval", required=True, help="the SemEval default bundle")
    ap.add_argument("--opensearch", default=None, help="an OpenSearch URL with k-NN (default: a throwaway node)")
    args = ap.parse_args(argv)
    from semdup.core.settings import OpenSearchSettings
    from semdup.devstack.local_opensearch import own_opensearch
    from semdup.opensearch_io.clients import connect

    with own_opensearch(args.opensearch, name=name) as url:
        client = connect(OpenSearchSettings(url=url, timeout=60), check=False)
        result = {keys[0]: travel(client, args.travel), keys[1]: semeval(client, args.semeval)}
    print(json.dumps(result, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_dev_sets(argv, __doc__, "onehop-lexnorm", _travel, _semeval,
                        ("travel (choices on train, figures on dev)", "semeval dev"))


if __name__ == "__main__":
    raise SystemExit(main())
