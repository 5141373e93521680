"""SemEval-2016 subtask B: MiniLM and its fusions with lexical and search-rank evidence, dev-chosen.

Run::

    python -m experiments.semeval_fusion [--checkpoint artifacts/bow-minilm-semeval]

Features of each (original, related) pair, all from the official input (no labels):

* ``minilm``: cosine of all-MiniLM-L6-v2 vectors (max_len 256), or with ``--checkpoint`` the fused
  score of a trained checkpoint (e.g. fine-tuned bow-minilm) read through ``CheckpointScorer``;
* ``bm25``: BM25 of the related question for the original, min-max normalised over its 10 candidates.
  Statistics (df, avgdl) come from the related questions of train + dev + test (unlabelled text);
* ``cos_bow``: cosine of IDF-weighted bags of words (BOW-CNN's t at initialisation; IDF from train);
* ``inv_rank``: 1 / RELQ_RANKING_ORDER, the search engine's rank shipped in the official input
  (the IR baseline's ranking; the 2016 systems used it as a feature);
* ``lin_rank``: (10 − rank) / 9.
* with ``--comments``: ``cmt_max`` and ``cmt_mean``, the highest and the mean MiniLM cosine between the
  original question and the comments of the related question's thread (the official XML ships them;
  train part 1 has none, so these two enter only the dev-grid variants, not the logistic regression).

Variants: each feature alone; ``minilm + w·f`` with w chosen on dev from a grid; and a logistic
regression over a feature set, trained on train part 1 + part 2 labels, its C and feature set
chosen on dev. Every variant prints dev and test; test is never used to choose. The variant
marked SELECTED is the one with the best dev MAP.
"""

from __future__ import annotations

import argparse
import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from experiments._peer_common import cached_embeddings
from semdup.measures.protocols import semeval_pair_scores

logger = logging.getLogger(__name__)

FEATURES = ("minilm", "bm25", "cos_bow", "inv_rank", "lin_rank", "cmt_max", "cmt_mean")
GRID = (0.0, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0)


@dataclass
class SetFeatures:
    """Features [n_pairs, n_features] in FEATURES order, labels [n_pairs], and (orgq, relq) ids."""

    name: str
    sem: object
    keys: list[tuple[str, str]]
    x: np.ndarray
    y: np.ndarray


def _train_sets():
    from semdup.data import load_semeval_pairs_jsonl, load_semeval_xml
    from semdup.data.paths import data_dir

    base = data_dir() / "semeval2016-task3"
    return [
        load_semeval_pairs_jsonl(base / "train-part1.pairs.jsonl"),
        load_semeval_xml(base / "official" / "SemEval2016-Task3-CQA-QL-train-part2.xml"),
    ]


def _minmax(v: np.ndarray) -> np.ndarray:
    lo, hi = float(v.min()), float(v.max())
    return np.zeros_like(v) if hi - lo < 1e-12 else (v - lo) / (hi - lo)


def build_features(
    sets: dict[str, object], dense_score, pipeline, vocab_posts, comment_score=None
) -> dict[str, SetFeatures]:
    """Compute every feature for every set (see module doc)."""
    from semdup.core.lexical_scores import LexicalIndex
    from semdup.core.scoring import bow_matrix
    from semdup.core.text_pipeline import TextPipeline, Vocabulary

    all_related = {r.post.id: r.post for s in sets.values() for q in s.questions for r in q.related}
    bm25 = LexicalIndex.build(pipeline, list(all_related.values()), kind="bm25")
    col = {pid: i for i, pid in enumerate(bm25.ids)}
    vocab = Vocabulary.build([pipeline.text_tokens(p) for p in vocab_posts])
    bow_pipe = TextPipeline(pipeline.settings, vocab)
    idf = np.asarray(vocab.idf())
    out = {}
    for name, sem in sets.items():
        keys, rows, labels = [], [], []
        originals = [q.post for q in sem.questions]
        lex = bm25.score_matrix(pipeline, originals)  # (n_q, n_related_all)
        for qi, q in enumerate(sem.questions):
            cands = [r.post for r in q.related]
            dense = dense_score(q.post, cands)
            b = bow_matrix(bow_pipe, [q.post, *cands], idf)
            cos_bow = np.asarray((b[1:] @ b[0].T).todense()).ravel()
            lexn = _minmax(np.array([lex[qi, col[c.id]] for c in cands]))
            for j, r in enumerate(q.related):
                keys.append((q.post.id, r.post.id))
                cmt = comment_score(q.post, r) if comment_score is not None and r.comments else (0.0, 0.0)
                rows.append([dense[j], lexn[j], cos_bow[j], 1.0 / r.rank, (10 - r.rank) / 9.0, *cmt])
                labels.append(bool(r.relevant))
        out[name] = SetFeatures(name, sem, keys, np.asarray(rows, dtype=np.float64), np.asarray(labels))
    return out


def official(f: SetFeatures, scores: np.ndarray) -> dict[str, float]:
    """Official SemEval-2016 scores of a score vector aligned with ``f.keys``."""
    return semeval_pair_scores(f.sem, zip(f.keys, scores, strict=True))


def _fmt(m: dict[str, float]) -> str:
    return f"MAP {m['MAP']:.2f} MRR {m['MRR']:.2f} P@1 {m['P@1']:.2f}"


def run_variants(feats: dict[str, SetFeatures]) -> list[tuple[str, dict, dict]]:
    """Every variant's (name, dev scores, test scores); choices use dev only."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    dev, test, train = feats["dev"], feats["test"], feats["train"]
    rows = []
    idx = {n: i for i, n in enumerate(FEATURES)}
    for n in FEATURES:
        rows.append((n, official(dev, dev.x[:, idx[n]]), official(test, test.x[:, idx[n]])))
    has_cmt = bool(np.any(dev.x[:, idx["cmt_max"]]))
    for n in ("bm25", "cos_bow", "inv_rank", "lin_rank", *(("cmt_max", "cmt_mean") if has_cmt else ())):
        best = max(GRID, key=lambda w: official(dev, dev.x[:, 0] + w * dev.x[:, idx[n]])["MAP"])
        rows.append(
            (
                f"minilm + {best}*{n}",
                official(dev, dev.x[:, 0] + best * dev.x[:, idx[n]]),
                official(test, test.x[:, 0] + best * test.x[:, idx[n]]),
            )
        )
    for n in ("inv_rank", "lin_rank"):
        best = max(
            itertools.product(GRID, GRID),
            key=lambda w: official(dev, dev.x[:, 0] + w[0] * dev.x[:, 1] + w[1] * dev.x[:, idx[n]])["MAP"],
        )
        rows.append(
            (
                f"minilm + {best[0]}*bm25 + {best[1]}*{n}",
                official(dev, dev.x[:, 0] + best[0] * dev.x[:, 1] + best[1] * dev.x[:, idx[n]]),
                official(test, test.x[:, 0] + best[0] * test.x[:, 1] + best[1] * test.x[:, idx[n]]),
            )
        )
    # The same two-weight fusions with the weights grid-searched on train's MAP (267 originals, 5x dev's size).
    for n in ("inv_rank", "lin_rank"):
        w = max(
            itertools.product(GRID, GRID),
            key=lambda w: official(train, train.x[:, 0] + w[0] * train.x[:, 1] + w[1] * train.x[:, idx[n]])["MAP"],
        )

        def fused_t(f: SetFeatures, w=w, n=n) -> np.ndarray:
            return f.x[:, 0] + w[0] * f.x[:, 1] + w[1] * f.x[:, idx[n]]

        rows.append(
            (
                f"train-grid: minilm + {w[0]}*bm25 + {w[1]}*{n}",
                official(dev, fused_t(dev)),
                official(test, fused_t(test)),
            )
        )
    if has_cmt:
        for n in ("cmt_max", "cmt_mean"):
            trip = max(
                itertools.product(GRID, GRID, GRID),
                key=lambda w: official(
                    dev, dev.x[:, 0] + w[0] * dev.x[:, 1] + w[1] * dev.x[:, idx["inv_rank"]] + w[2] * dev.x[:, idx[n]]
                )["MAP"],
            )

            def fused(f: SetFeatures, w=trip, n=n) -> np.ndarray:
                return f.x[:, 0] + w[0] * f.x[:, 1] + w[1] * f.x[:, idx["inv_rank"]] + w[2] * f.x[:, idx[n]]

            rows.append(
                (
                    f"minilm + {trip[0]}*bm25 + {trip[1]}*inv_rank + {trip[2]}*{n}",
                    official(dev, fused(dev)),
                    official(test, fused(test)),
                )
            )
    subsets = [
        ("minilm", "bm25"),
        ("minilm", "inv_rank"),
        ("minilm", "bm25", "inv_rank"),
        ("minilm", "bm25", "lin_rank"),
        ("minilm", "bm25", "cos_bow", "inv_rank"),
        ("minilm", "bm25", "cos_bow", "inv_rank", "lin_rank"),
    ]
    lr_rows = []
    for subset, c in itertools.product(subsets, (0.01, 0.1, 1.0, 10.0)):
        cols = [idx[n] for n in subset]
        scaler = StandardScaler().fit(train.x[:, cols])
        clf = LogisticRegression(C=c, max_iter=1000).fit(scaler.transform(train.x[:, cols]), train.y)
        d = official(dev, clf.decision_function(scaler.transform(dev.x[:, cols])))
        t = official(test, clf.decision_function(scaler.transform(test.x[:, cols])))
        w = ", ".join(f"{n} {v:+.2f}" for n, v in zip(subset, clf.coef_[0], strict=True))
        lr_rows.append((f"LR[{'+'.join(subset)}] C={c} ({w})", d, t))
    best_lr = max(lr_rows, key=lambda r: r[1]["MAP"])
    rows.append(("best-dev " + best_lr[0], best_lr[1], best_lr[2]))
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default=None, help="use this checkpoint's fused score as the 'minilm' feature")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--comments", action="store_true", help="add the thread-comment features (embeds ~12k comments)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    import torch

    from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings
    from semdup.data import SemEvalSet, load_semeval_xml
    from semdup.data.paths import semeval_files

    torch.set_num_threads(args.threads)
    train_sets = _train_sets()
    sets = {
        "train": SemEvalSet("train", tuple(q for s in train_sets for q in s.questions)),
        "dev": load_semeval_xml(*semeval_files("dev"), name="dev"),
        "test": load_semeval_xml(*semeval_files("test"), name="test"),
    }
    vocab_posts = list(
        {p.id: p for s in train_sets for q in s.questions for p in (q.post, *[r.post for r in q.related])}.values()
    )
    if args.checkpoint:
        from semdup.training.checkpoint import CheckpointScorer

        scorer = CheckpointScorer.from_dir(args.checkpoint)

        def dense_score(q, cands):
            return scorer.score(q, cands)

        label = f"checkpoint {args.checkpoint}"
    else:
        from semdup.training.models.minilm import MiniLM

        model = MiniLM.from_hparams({"max_len": 256}, TextPipeline(TextPipelineSettings()))
        posts = {}
        for s in sets.values():
            for q in s.questions:
                posts[q.post.id] = q.post
                posts.update({r.post.id: r.post for r in q.related})
        ids = list(posts)
        vec = cached_embeddings("minilm256", [posts[i] for i in ids], lambda ps: model.embed(ps).numpy())
        ix = {i: n for n, i in enumerate(ids)}

        def dense_score(q, cands):
            return np.array([float(vec[ix[q.id]] @ vec[ix[c.id]]) for c in cands])

        label = "all-MiniLM-L6-v2 cosine (max_len 256)"
    comment_score = None
    if args.comments:
        from semdup.core.posts import Post
        from semdup.training.models.minilm import MiniLM

        base = MiniLM.from_hparams({"max_len": 128}, TextPipeline(TextPipelineSettings()))
        cvec: dict[str, np.ndarray] = {}
        for name in ("dev", "test"):
            items = [(q.post, r) for q in sets[name].questions for r in q.related]
            cposts = [Post(c.id, "", c.text) for _, r in items for c in r.comments if c.text.strip()]
            qposts = list({q.id: q for q, _ in items}.values())
            allp = qposts + cposts
            v = cached_embeddings(f"minilm128-comments-{name}", allp, lambda ps: base.embed(ps).numpy())
            cvec.update({p.id: v[i] for i, p in enumerate(allp)})

        def comment_score(q, r):
            got = [cvec[c.id] for c in r.comments if c.id in cvec]
            if not got:  # every comment of the thread is empty
                return 0.0, 0.0
            vs = np.stack(got)
            cos = vs @ cvec[q.id]
            centre = vs.mean(axis=0)
            return float(cos.max()), float(centre @ cvec[q.id] / max(np.linalg.norm(centre), 1e-9))

    feats = build_features(sets, dense_score, TextPipeline(TextPipelineSettings()), vocab_posts, comment_score)
    rows = run_variants(feats)
    best = max(rows, key=lambda r: r[1]["MAP"])
    print(f"# SemEval-2016 subtask B fusion; dense feature = {label}")
    print(f"# train pairs {len(feats['train'].y)}, dev {len(feats['dev'].y)}, test {len(feats['test'].y)}")
    for name, d, t in rows:
        mark = "  <- SELECTED (best dev MAP)" if (name, d, t) == best else ""
        print(f"{name}\n    dev  {_fmt(d)}\n    test {_fmt(t)}{mark}")


if __name__ == "__main__":
    main()
