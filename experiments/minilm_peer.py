"""The all-MiniLM-L6-v2 peer on the three real data sets, by each set's own protocol.

Run::

    python -m experiments.minilm_peer [--max-len 256] [--threads 1]

Every figure goes through :mod:`semdup.measures.protocols`, the code training and ``semdup eval`` use:
SemEval-2016 dev/test: cosine reranks each original question's 10 related questions (official rules);
Travel dev/test: exhaustive retrieval over all 4,919 posts (Acc@1/5/10, MAP, MRR over the top 100);
AskUbuntu: accuracy on test with the cosine threshold chosen on train. Embeddings are cached
under ``artifacts/experiments/embeddings`` (keyed by the posts' text and max_len).
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence

import numpy as np

from experiments._peer_common import cached_embeddings
from semdup.data import load_pairs_jsonl, load_semeval_xml, load_stackexchange_dump
from semdup.data.paths import askubuntu_files, semeval_files, travel_dir
from semdup.measures.protocols import eval_pair_scores, semeval_pair_scores, travel_scores

logger = logging.getLogger(__name__)

COUNTS = ("n_queries", "n_pairs", "threshold_tuned_here")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: reproducible, shares the machine)")
    args = ap.parse_args(argv)
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
        sem = load_semeval_xml(*semeval_files(split), name=split)
        posts = {q.post.id: q.post for q in sem.questions}
        posts.update({r.post.id: r.post for q in sem.questions for r in q.related})
        ids = list(posts)
        vec = embed([posts[i] for i in ids])
        ix = {i: n for n, i in enumerate(ids)}
        scores = (
            ((q.post.id, r.post.id), float(vec[ix[q.post.id]] @ vec[ix[r.post.id]]))
            for q in sem.questions
            for r in q.related
        )
        results[f"semeval-{split}"] = semeval_pair_scores(sem, scores)

    dump = load_stackexchange_dump(travel_dir())
    corpus = dump.corpus()
    cvec = embed(corpus)
    pos = {p.id: i for i, p in enumerate(corpus)}
    for split in ("dev", "test"):
        queries = dump.queries(split)
        qvec = cvec[[pos[q.post.id] for q in queries]]
        results[f"travel-{split}"] = travel_scores(qvec @ cvec.T, queries, [p.id for p in corpus])

    def cosines(pairs):
        q = embed([p.query for p in pairs])
        c = embed([p.candidate for p in pairs])
        return np.sum(q * c, axis=1), [p.duplicate for p in pairs]

    train_file, test_file = askubuntu_files()
    train = eval_pair_scores(*cosines(load_pairs_jsonl(train_file)))
    test = eval_pair_scores(*cosines(load_pairs_jsonl(test_file)), threshold=train["threshold"])
    results["askubuntu-train"] = train
    results["askubuntu-test"] = test
    print(f"# MiniLM peer, max_len={args.max_len}")
    for name, m in results.items():
        print(name, json.dumps({k: round(v, 4 if k == "threshold" else 2) for k, v in m.items() if k not in COUNTS}))


if __name__ == "__main__":
    main()
