"""Issue #42, item 2: the one-hop pipeline's ranking beside ``/v1/rerank``'s on the dev sets, chosen before test.

The one-hop rewrite (:mod:`semdup.reranker.onehop`) answers the site's search with one query the node runs. This
runs that query exactly as the pipeline's processor puts it in place (the site's body, its ``query`` replaced by
semdup's answer), on the node, for every dev query, beside the service's own ``Reranker.rank``:

* Travel dev: the site's search for a new post (``match`` on its title and on its body, the post itself left out
  by a ``must_not``), the official Travel MAP over the top 100 (the demo's measure);
* SemEval-2016 dev: each question's ten related questions, which the site names as an ``ids`` filter (the
  restriction the one-hop query keeps inside both of its candidate lists); official MAP, the candidates the
  node did not return scored last.

Also printed: how many of the top 10 the two share, and the one-hop's ``search`` time in the node (``took``).
Pass the bundles ``semdup demo`` builds::

    python -m experiments.onehop_quality --travel artifacts/demo/default-minilm-travel \\
        --semeval artifacts/demo/default-minilm-semeval
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def site_search(post: Any, size: int, restrict: Sequence[str] | None = None, exclude: bool = True) -> dict[str, Any]:
    """What a site sends for the duplicates of ``post``: its title and body; itself left out, or only ``restrict``."""
    should = [{"match": {"title": post.title}}] if post.title else []
    should += [{"match": {"body": post.body}}] if post.body else []
    query: dict[str, Any] = {"should": should}
    if exclude:
        query["must_not"] = [{"ids": {"values": [post.id]}}]
    if restrict is not None:
        query["filter"] = [{"ids": {"values": list(restrict)}}]
    return {"size": size, "_source": False, "query": {"bool": query}}


def onehop_ranking(rr: Any, index: str, search: dict[str, Any]) -> tuple[list[str], int]:
    """The ids the node returns for the one-hop answer to ``search``, and its ``took`` (ms)."""
    from semdup.reranker import onehop
    from semdup.reranker.rewrite import post_of_search

    resolved = rr.indices.resolve(index, rr.settings)
    if not onehop.serves(resolved, rr.bundle.dimension is not None):
        raise SystemExit(f"{index}: the one-hop query needs semdup's own index with k-NN and a dense bundle")
    answer = onehop.rewrite(rr, search, post_of_search(search, *resolved.text_fields), resolved, index)
    got = rr.client.search(index=index, body={**search, "query": answer.query}, params={"request_timeout": 60})
    return [str(h["_id"]) for h in got["hits"]["hits"]], int(got.get("took", 0))


def _shared(a: dict[str, list[str]], b: dict[str, list[str]]) -> float:
    return round(statistics.mean(len(set(a[q][:10]) & set(b[q][:10])) for q in a), 2)


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
    dev = dump.queries("dev")
    rel = {q.post.id: set(q.relevant) for q in dev}
    with semantic_index(client, bundle, dump.corpus(), "onehop-q", progress=False,
                        search=CandidateFields(False, True)) as index:  # BM25 ∪ k-NN, as the demo
        rr = Reranker(bundle, client, index, RerankerSettings(knn=True, search_timeout=30))
        service = {q.post.id: [x.id for x in rr.rank(q.post, k=100, exclude_id=q.post.id)] for q in dev}
        took, one = [], {}
        for q in dev:
            one[q.post.id], ms = onehop_ranking(rr, index, site_search(q.post, 100))
            took.append(ms)
    return {"queries": len(dev),
            "/v1/rerank MAP": round(retrieval_scores(service, rel, 100)["MAP"], 2),
            "one-hop MAP": round(retrieval_scores(one, rel, 100)["MAP"], 2),
            "top 10 shared (mean of 10)": _shared(one, service),
            "one-hop node took p50 ms": statistics.median(took)}  # fmt: skip


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
    with semantic_index(client, bundle, sem.related_posts(), "onehop-q-sem", progress=False,
                        search=CandidateFields(False, True)) as index:  # fmt: skip
        rr = Reranker(bundle, client, index, RerankerSettings(k_candidates=10, search_timeout=30))
        service, one, preds = {}, {}, {"/v1/rerank": {}, "one-hop": {}}
        for q in sem.questions:
            related = [r.post.id for r in q.related]
            got = rr.rank(q.post, k=len(related), restrict_ids=related)
            service[q.post.id] = [c.id for c in got]
            preds["/v1/rerank"][q.post.id] = complete_scores({c.id: c.score for c in got}, related)
            ids, _ = onehop_ranking(rr, index, site_search(q.post, len(related), related, exclude=False))
            one[q.post.id] = ids
            preds["one-hop"][q.post.id] = complete_scores({d: -r for r, d in enumerate(ids)}, related)
    out: dict[str, Any] = {"questions": len(sem.questions)}
    for name, p in preds.items():
        out[f"{name} MAP"] = round(semeval_scores(p, sem.gold())["MAP"], 2)
    out["top 10 shared (mean of 10)"] = _shared(one, service)
    return out


def main(argv: list[str] | None = None) -> int:
    from experiments.onehop_lexnorm import run_dev_sets

    return run_dev_sets(argv, __doc__, "onehop-quality", _travel, _semeval, ("travel dev", "semeval dev"))


if __name__ == "__main__":
    raise SystemExit(main())
