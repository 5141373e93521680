"""The all-MiniLM-L6-v2 peer on the three real data sets, by each set's own protocol.

Run::

    python -m experiments.minilm_peer [--max-len 256] [--threads 2]

SemEval-2016 dev/test: cosine reranks each original question's 10 related questions (MAP/MRR/P@1).
Travel dev/test: exhaustive retrieval over all 4,919 posts (Acc@1/5/10, MAP, MRR over the top 100).
AskUbuntu: accuracy on test with the cosine threshold chosen on train. Embeddings are cached
under ``artifacts/experiments/embeddings`` (keyed by the posts' text and max_len).
"""

from __future__ import annotations

import argparse
import json
import logging

import numpy as np

from experiments._peer_common import (
    askubuntu_pairs,
    best_threshold,
    cached_embeddings,
    retrieval_metrics,
    semeval_metrics,
    semeval_set,
    travel_dump,
)

logger = logging.getLogger(__name__)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    import torch

    from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings
    from semdup.training.models.minilm import MiniLM

    torch.set_num_threads(args.threads)
    model = MiniLM.from_hparams({"max_len": args.max_len}, TextPipeline(TextPipelineSettings()))
    tag = f"minilm{args.max_len}"

    def embed(posts):
        return cached_embeddings(tag, posts, lambda ps: model.embed(ps).numpy())

    results: dict[str, dict[str, float]] = {}
    for split in ("dev", "test"):
        sem = semeval_set(split)
        posts = {q.post.id: q.post for q in sem.questions}
        posts.update({r.post.id: r.post for q in sem.questions for r in q.related})
        ids = list(posts)
        vec = embed([posts[i] for i in ids])
        ix = {i: n for n, i in enumerate(ids)}
        scores = {
            (q.post.id, r.post.id): float(vec[ix[q.post.id]] @ vec[ix[r.post.id]])
            for q in sem.questions
            for r in q.related
        }
        results[f"semeval-{split}"] = semeval_metrics(sem, scores)

    dump = travel_dump()
    corpus = dump.corpus()
    cvec = embed(corpus)
    pos = {p.id: i for i, p in enumerate(corpus)}
    for split in ("dev", "test"):
        queries = dump.queries(split)
        qvec = cvec[[pos[q.post.id] for q in queries]]
        results[f"travel-{split}"] = retrieval_metrics(qvec @ cvec.T, [p.id for p in corpus], queries)

    def pair_scores(pairs):
        q = embed([p.query for p in pairs])
        c = embed([p.candidate for p in pairs])
        return np.sum(q * c, axis=1), np.array([p.duplicate for p in pairs])

    tr_s, tr_y = pair_scores(askubuntu_pairs("train"))
    te_s, te_y = pair_scores(askubuntu_pairs("test"))
    thr, tr_acc = best_threshold(tr_s, tr_y)
    results["askubuntu"] = {
        "threshold": thr,
        "train_acc": tr_acc,
        "test_acc": 100 * float(np.mean((te_s >= thr) == te_y)),
    }
    print(f"# MiniLM peer, max_len={args.max_len}")
    for name, m in results.items():
        print(name, json.dumps({k: round(v, 2) for k, v in m.items()}))


if __name__ == "__main__":
    main()
