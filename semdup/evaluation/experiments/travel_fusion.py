"""Travel Stack Exchange: MiniLM (or a trained checkpoint) fused with BM25, the weight chosen on dev.

Run::

    python -m semdup.evaluation.experiments.travel_fusion [--checkpoint artifacts/bow-minilm-travel-gpu]

Exhaustive retrieval over all 4,919 posts, the Travel protocol of :mod:`minilm_peer` (the query removed;
Acc@1/5/10, MAP, MRR over the top 100). Scores of a query against every post:

* ``dense``: cosine of all-MiniLM-L6-v2 vectors (max_len 256, cached), or with ``--checkpoint`` the
  checkpoint's fused score (``CheckpointScorer.score_matrix``);
* ``bm25``: BM25 over the same posts (semdup's text pipeline; statistics from all posts, unlabelled text),
  divided by the query's highest BM25 so it lies in [0, 1] like a cosine;
* ``title``: cosine of all-MiniLM-L6-v2 vectors of the titles alone (a Travel duplicate usually asks the
  same thing in its title; the body, cut at 256 wordpieces, dilutes it).

Variants: each alone, and ``dense + w1·bm25 + w2·title`` for (w1, w2) in a grid; the weights are chosen on
dev MAP, test is printed for every variant and never used to choose. The line marked SELECTED is the dev
choice.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

import numpy as np

from semdup.evaluation.experiments._peer_common import cached_embeddings, retrieval_metrics, travel_dump

logger = logging.getLogger(__name__)

GRID = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0)
TITLE_GRID = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5)


def _max_norm(m: np.ndarray) -> np.ndarray:
    top = m.max(axis=1, keepdims=True)
    return m / np.where(top > 0, top, 1.0)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", help="score with this checkpoint instead of the MiniLM peer")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    import torch

    from semdup.encoders.lexical_scores import LexicalIndex
    from semdup.encoders.text_pipeline import TextPipeline, TextPipelineSettings

    torch.set_num_threads(args.threads)
    dump = travel_dump()
    corpus = dump.corpus()
    ids = [p.id for p in corpus]
    pos = {p.id: i for i, p in enumerate(corpus)}
    splits = {s: dump.queries(s) for s in ("dev", "test")}
    from semdup.encoders.models.minilm import MiniLM
    from semdup.posts import Post

    peer = MiniLM.from_hparams({"max_len": 256}, TextPipeline(TextPipelineSettings()))
    titles = [Post(p.id, p.title, "") for p in corpus]
    tvec = cached_embeddings("minilm256-titles", titles, lambda ps: peer.embed(ps).numpy())
    title = {s: tvec[[pos[q.post.id] for q in qs]] @ tvec.T for s, qs in splits.items()}
    if args.checkpoint:
        from semdup.encoders.checkpoint import CheckpointScorer

        scorer = CheckpointScorer.from_dir(args.checkpoint, progress=True)
        dense = {s: scorer.score_matrix([q.post for q in qs], corpus) for s, qs in splits.items()}
        label = f"checkpoint {args.checkpoint}"
    else:
        vec = cached_embeddings("minilm256", corpus, lambda ps: peer.embed(ps).numpy())
        dense = {s: vec[[pos[q.post.id] for q in qs]] @ vec.T for s, qs in splits.items()}
        label = "all-MiniLM-L6-v2 cosine"
    pipeline = TextPipeline(TextPipelineSettings())
    index = LexicalIndex.build(pipeline, corpus, kind="bm25")
    if list(index.ids) != ids:
        raise RuntimeError("the BM25 index does not list the posts in corpus order")
    bm25 = {s: _max_norm(index.score_matrix(pipeline, [q.post for q in qs])) for s, qs in splits.items()}

    def metrics(s: str, w: float, wt: float) -> dict[str, float]:
        return retrieval_metrics(dense[s] + w * bm25[s] + wt * title[s], ids, splits[s])

    def fmt(m: dict[str, float]) -> str:
        return " / ".join(f"{m[k]:.2f}" for k in ("Acc@1", "Acc@5", "Acc@10", "MAP", "MRR"))

    print(f"# Travel, dense = {label}; Acc@1 / Acc@5 / Acc@10 / MAP / MRR")
    for name, alone in (("bm25", bm25), ("title", title)):
        print(f"{name + ' alone':<24}dev {fmt(retrieval_metrics(alone['dev'], ids, splits['dev']))}"
              f"   test {fmt(retrieval_metrics(alone['test'], ids, splits['test']))}")
    rows = [((w, wt), metrics("dev", w, wt), metrics("test", w, wt)) for wt in TITLE_GRID for w in GRID]
    best = max(rows, key=lambda r: r[1]["MAP"])
    for (w, wt), dev, test in rows:
        mark = "  SELECTED" if (w, wt) == best[0] else ""
        print(f"dense + {w:<4}*bm25 + {wt:<4}*title  dev {fmt(dev)}   test {fmt(test)}{mark}")


if __name__ == "__main__":
    main()
