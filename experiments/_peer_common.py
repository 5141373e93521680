"""Small shared pieces of the MiniLM experiments: data loading, embedding cache, official-rule metrics.

Metrics follow the data sets' READMEs: SemEval-2016 subtask B MAP / MRR / P@1 over each original
question's 10 related questions (a question without a relevant one has AP 0 and still counts);
Travel Accuracy@k, MAP and MRR over the top 100; AskUbuntu accuracy with the threshold chosen on train.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from semdup.core.posts import Post
from semdup.data.paths import default_data_dir

logger = logging.getLogger(__name__)

DATA = default_data_dir()
SEMEVAL = DATA / "semeval2016-task3" / "official"
CACHE = Path("artifacts/experiments/embeddings")


def semeval_set(split: str):
    """Dev or test 2016 with gold labels (``load_semeval_xml``)."""
    from semdup.data.semeval import load_semeval_xml

    if split == "dev":
        return load_semeval_xml(
            SEMEVAL / "SemEval2016-Task3-CQA-QL-dev.xml",
            SEMEVAL / "SemEval2016-Task3-CQA-QL-dev.xml.subtaskB.relevancy",
        )
    if split == "test":
        return load_semeval_xml(
            SEMEVAL / "SemEval2016-Task3-CQA-QL-test-input.xml",
            SEMEVAL / "SemEval2016-Task3-CQA-QL-test.xml.subtaskB.relevancy",
        )
    raise ValueError(f"unknown SemEval split {split!r}; accepted: dev, test")


def ranking_metrics(ranked_labels: Sequence[Sequence[bool]], k: int = 10) -> dict[str, float]:
    """MAP, MRR, P@1 (in %) over lists of relevance labels in ranked order, cut at k; AP 0 when none relevant."""
    aps, rrs, p1 = [], [], []
    for labels in ranked_labels:
        labels = list(labels)[:k]
        hits, precs, rr = 0, [], 0.0
        for i, rel in enumerate(labels, 1):
            if rel:
                hits += 1
                precs.append(hits / i)
                if rr == 0.0:
                    rr = 1.0 / i
        aps.append(sum(precs) / hits if hits else 0.0)
        rrs.append(rr)
        p1.append(1.0 if labels and labels[0] else 0.0)
    return {"MAP": 100 * float(np.mean(aps)), "MRR": 100 * float(np.mean(rrs)), "P@1": 100 * float(np.mean(p1))}


def semeval_metrics(sem, scores: dict[tuple[str, str], float]) -> dict[str, float]:
    """Rank each original question's related questions by score (stable: file order breaks ties)."""
    lists = []
    for q in sem.questions:
        rel = list(q.related)
        order = sorted(range(len(rel)), key=lambda i: -scores[(q.post.id, rel[i].post.id)])
        lists.append([bool(rel[i].relevant) for i in order])
    return ranking_metrics(lists)


def post_key(posts: Sequence[Post]) -> str:
    h = hashlib.sha1()
    for p in posts:
        h.update(f"{p.id}\x00{p.title}\x00{p.body}\x01".encode())
    return h.hexdigest()[:16]


def cached_embeddings(tag: str, posts: Sequence[Post], embed) -> np.ndarray:
    """``embed(posts) -> (N, D)`` cached under artifacts/ by a hash of the posts' text."""
    path = CACHE / f"{tag}-{post_key(posts)}.npy"
    if path.exists():
        return np.load(path)
    vec = np.asarray(embed(posts), dtype=np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, vec, allow_pickle=False)
    return vec


def travel_dump():
    from semdup.data.stackexchange import load_stackexchange_dump

    return load_stackexchange_dump(DATA / "travel-stackexchange", DATA / "travel-stackexchange" / "splits.tsv")


def retrieval_metrics(scores: np.ndarray, corpus_ids: Sequence[str], queries, top: int = 100) -> dict[str, float]:
    """Travel protocol: the query itself is removed; Acc@1/5/10 and MAP, MRR over the top 100 (in %)."""
    ids = np.asarray(corpus_ids)
    pos = {cid: i for i, cid in enumerate(corpus_ids)}
    acc = {1: [], 5: [], 10: []}
    aps, rrs = [], []
    for qi, q in enumerate(queries):
        s = scores[qi].astype(np.float64).copy()
        s[pos[q.post.id]] = -np.inf
        order = np.argsort(-s, kind="stable")[:top]
        labels = [cid in q.relevant for cid in ids[order]]
        for k in acc:
            acc[k].append(any(labels[:k]))
        hits, ap, rr = 0, 0.0, 0.0
        for i, rel in enumerate(labels, 1):
            if rel:
                hits += 1
                ap += hits / i
                rr = rr or 1.0 / i
        aps.append(ap / max(1, len(q.relevant)))  # trec_eval: divided by all relevant posts
        rrs.append(rr)
    out = {f"Acc@{k}": 100 * float(np.mean(v)) for k, v in acc.items()}
    out.update({"MAP": 100 * float(np.mean(aps)), "MRR": 100 * float(np.mean(rrs))})
    return out


def askubuntu_pairs(split: str):
    from semdup.data.pairs import load_pairs_jsonl

    return load_pairs_jsonl(DATA / "askubuntu-pairs" / f"{split}.pairs.jsonl")


def best_threshold(scores: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Threshold maximising accuracy (midpoint between neighbouring scores); returns (threshold, accuracy %)."""
    order = np.sort(np.unique(scores))
    cands = np.concatenate([[order[0] - 1e-6], (order[:-1] + order[1:]) / 2, [order[-1] + 1e-6]])
    accs = [float(np.mean((scores >= t) == labels)) for t in cands]
    i = int(np.argmax(accs))
    return float(cands[i]), 100 * accs[i]
