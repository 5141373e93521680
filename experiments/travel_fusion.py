"""Travel Stack Exchange: MiniLM (or a trained checkpoint) fused with BM25, the weight chosen on dev.

Run::

    python -m experiments.travel_fusion [--checkpoint artifacts/bow-minilm-travel-gpu]

Exhaustive retrieval over all 4,919 posts, the Travel protocol of :func:`semdup.measures.protocols.travel_scores`
(the query removed; Acc@1/5/10, MAP, MRR over the top 100). Scores of a query against every post:

* ``dense``: cosine of all-MiniLM-L6-v2 vectors (max_len 256, cached), or with ``--checkpoint`` the
  checkpoint's fused score (``CheckpointScorer.score_matrix``);
* ``bm25``: BM25 over the same posts (semdup's text pipeline; statistics from all posts, unlabelled text),
  divided by the query's highest BM25 so it lies in [0, 1] like a cosine;
* ``title``: cosine of all-MiniLM-L6-v2 vectors of the titles alone (a Travel duplicate usually asks the
  same thing in its title; the body, cut at 256 wordpieces, dilutes it).

* ``cnn`` (only with ``--bow-cnn DIR``, repeatable): a trained BOW-CNN checkpoint's score, in one of two
  kinds, both chosen among on dev: ``fused`` = (β_bow·cos_bow + β_dense·cos_conv) / (β_bow + β_dense), the
  checkpoint's own score scaled to [-1, 1]; ``bow`` = cos_bow alone (the learned-weight bag of words). Several
  directories give the mean of their scores (a seed ensemble: an evaluation experiment, not one model).

Variants: each alone, and ``dense + w1·bm25 + w2·title`` for (w1, w2) in a grid (with ``--bow-cnn``: plus
``w3·cnn`` for each kind and w3 in ``CNN_GRID``); the weights are chosen on dev MAP. Without ``--bow-cnn``
test is printed for every variant; with it (990 variants) each (kind, w3) prints its dev-best (w1, w2)
with dev and test. Test is never used to choose; the line marked SELECTED is the dev choice.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

import numpy as np

from experiments._peer_common import cached_embeddings
from semdup.measures.protocols import travel_scores

logger = logging.getLogger(__name__)

GRID = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0)
TITLE_GRID = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5)
CNN_GRID = (0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5)
CNN_KINDS = ("fused", "bow")


def _max_norm(m: np.ndarray) -> np.ndarray:
    top = m.max(axis=1, keepdims=True)
    return m / np.where(top > 0, top, 1.0)


def bow_cnn_features(dirs: Sequence[str], queries: dict[str, list], corpus: list) -> dict[str, dict[str, np.ndarray]]:
    """kind ("fused" / "bow") → split → (Q, N) scores: the mean over the checkpoints in ``dirs``."""
    from semdup.core.scoring import cosine_matrix
    from semdup.training.checkpoint import CheckpointScorer

    out: dict[str, dict[str, np.ndarray]] = {k: {s: 0.0 for s in queries} for k in CNN_KINDS}
    for d in dirs:
        scorer = CheckpointScorer.from_dir(d, progress=True)
        f = scorer.fusion
        c_dense, c_bow = scorer.encode(corpus)
        for s, qs in queries.items():
            q_dense, q_bow = scorer.encode([q.post for q in qs])
            bow, dense = cosine_matrix(q_bow, c_bow), cosine_matrix(q_dense, c_dense)
            fused = (f["beta_bow"] * bow + f["beta_dense"] * dense) / (f["beta_bow"] + f["beta_dense"])
            out["fused"][s] = out["fused"][s] + fused / len(dirs)
            out["bow"][s] = out["bow"][s] + bow / len(dirs)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", help="score with this checkpoint instead of the MiniLM peer")
    ap.add_argument("--bow-cnn", action="append", default=[],
                    help="add this BOW-CNN checkpoint's score as a feature (repeat: mean of several)")
    ap.add_argument("--dev-only", action="store_true", help="print dev figures only (choosing what to run)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    import torch

    from semdup.core.lexical_scores import LexicalIndex
    from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings
    from semdup.data import load_stackexchange_dump
    from semdup.data.paths import travel_dir

    torch.set_num_threads(args.threads)
    dump = load_stackexchange_dump(travel_dir())
    corpus = dump.corpus()
    ids = [p.id for p in corpus]
    pos = {p.id: i for i, p in enumerate(corpus)}
    splits = {s: dump.queries(s) for s in ("dev", "test")}
    from semdup.core.posts import Post
    from semdup.training.models.minilm import MiniLM

    peer = MiniLM.from_hparams({"max_len": 256}, TextPipeline(TextPipelineSettings()))
    titles = [Post(p.id, p.title, "") for p in corpus]
    tvec = cached_embeddings("minilm256-titles", titles, lambda ps: peer.embed(ps).numpy())
    title = {s: tvec[[pos[q.post.id] for q in qs]] @ tvec.T for s, qs in splits.items()}
    if args.checkpoint:
        from semdup.training.checkpoint import CheckpointScorer

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

    cnn = bow_cnn_features(args.bow_cnn, {s: list(qs) for s, qs in splits.items()}, corpus) if args.bow_cnn else {}

    def metrics(s: str, w: float, wt: float, kind: str | None = None, wc: float = 0.0) -> dict[str, float]:
        if s == "test" and args.dev_only:
            return dict.fromkeys(("Acc@1", "Acc@5", "Acc@10", "MAP", "MRR"), float("nan"))
        extra = wc * cnn[kind][s] if kind else 0.0
        return travel_scores(dense[s] + w * bm25[s] + wt * title[s] + extra, splits[s], ids)

    def fmt(m: dict[str, float]) -> str:
        return " / ".join(f"{m[k]:.2f}" for k in ("Acc@1", "Acc@5", "Acc@10", "MAP", "MRR"))

    print(f"# Travel, dense = {label}; Acc@1 / Acc@5 / Acc@10 / MAP / MRR")
    alone_rows = [("bm25", bm25), ("title", title)] + [(f"cnn-{k}", cnn[k]) for k in cnn]
    for name, alone in alone_rows:
        test = {} if args.dev_only else {"test": fmt(travel_scores(alone["test"], splits["test"], ids))}
        print(f"{name + ' alone':<24}dev {fmt(travel_scores(alone['dev'], splits['dev'], ids))}"
              f"   test {test.get('test', '(not run: --dev-only)')}")
    if cnn:
        print(f"# + w3 * cnn, cnn = BOW-CNN {' + '.join(args.bow_cnn)}; a row: its (kind, w3)'s dev-best (w1, w2)")
        _print_cnn_grid(metrics, fmt)
        return
    rows = [((w, wt), metrics("dev", w, wt), metrics("test", w, wt)) for wt in TITLE_GRID for w in GRID]
    best = max(rows, key=lambda r: r[1]["MAP"])
    for (w, wt), dev, test in rows:
        mark = "  SELECTED" if (w, wt) == best[0] else ""
        print(f"dense + {w:<4}*bm25 + {wt:<4}*title  dev {fmt(dev)}   test {fmt(test)}{mark}")


def _print_cnn_grid(metrics, fmt) -> None:  # noqa: ANN001 - the two closures of main
    """Per (kind, w3): the dev-best (w1, w2); then SELECTED on the best dev MAP of all (w3 = 0 included)."""
    best_rows = []
    for kind, wc in [(None, 0.0)] + [(k, wc) for k in CNN_KINDS for wc in CNN_GRID]:
        devs = [((w, wt), metrics("dev", w, wt, kind, wc)) for wt in TITLE_GRID for w in GRID]
        (w, wt), dev = max(devs, key=lambda r: r[1]["MAP"])  # first of ties: the grids run from small weights
        best_rows.append(((kind, wc, w, wt), dev))
    chosen = max(best_rows, key=lambda r: r[1]["MAP"])[0]
    for (kind, wc, w, wt), dev in best_rows:
        test = metrics("test", w, wt, kind, wc)
        mark = "  SELECTED" if (kind, wc, w, wt) == chosen else ""
        name = f"{wc:<4}*cnn-{kind}" if kind else "no cnn"
        print(f"dense + {w:<4}*bm25 + {wt:<4}*title + {name:<15} dev {fmt(dev)}   test {fmt(test)}{mark}")


if __name__ == "__main__":
    main()
