"""Issue #18 research: learned bag-of-words weights t (BOW-CNN, IDF at the start) vs IDF, SemEval dev.

Run from the repository root::

    python -m experiments.learn_terms --bundle artifacts/bundles/minilm [--l2 1e-3 1e-2] [--epochs 50 200]

The fused score's other parts are fixed: the bundle's dense and title cosines, BM25's lexnorm, and the fusion
(β_bow, α, β_title) chosen on the 267 training originals with IDF weights (``semdup.learn.fusion_fit
.choose_fusion``, as ``semdup fit-default --data semeval`` now does). t is learned on the same training originals
(``experiments.term_weights.learn_term_weights``: BOW-CNN's logistic loss on the hardest labelled
negative, λ‖t − idf‖²), and dev MAP is compared with IDF's under the same fusion (and with the fusion re-chosen on
train for the learned t), each with a paired randomisation test over the 50 dev questions. Test is never scored.
"""

from __future__ import annotations

import argparse
import itertools
import logging
from collections.abc import Sequence

import numpy as np

logger = logging.getLogger(__name__)


def _tf(pipeline, post) -> tuple[np.ndarray, np.ndarray]:
    tf = pipeline.term_frequencies(pipeline.text_tokens(post))
    return np.fromiter(tf.keys(), dtype=np.int64, count=len(tf)), np.fromiter(tf.values(), dtype=np.float64,
                                                                             count=len(tf))


def _with_bow(groups, sem, pipeline, t):
    """The groups with cos_bow recomputed under term weights t (the rest unchanged)."""
    from dataclasses import replace

    from semdup.core.scoring import bow_matrix

    out = []
    for g, q in zip(groups, sem.questions, strict=True):
        m = bow_matrix(pipeline, [q.post, *[r.post for r in q.related]], t)
        cos = np.asarray((m[1:] @ m[0].T).todense()).ravel()
        out.append(replace(g, cos_bow=cos))
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", default="artifacts/bundles/minilm")
    ap.add_argument("--l2", type=float, nargs="+", default=[1e-3, 1e-2, 1e-1])
    ap.add_argument("--epochs", type=int, nargs="+", default=[50, 200])
    ap.add_argument("--lr", type=float, default=0.05)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from experiments.learn_fusion import _groups, _posts, _sets, per_question
    from semdup.bundle import Bundle
    from semdup.core.scoring import fused_scores, minmax_normalise
    from semdup.learn.default_bundle import idf_pipeline
    from semdup.learn.fusion_fit import GRID_TITLE, choose_fusion
    from semdup.measures.significance import paired_randomisation_test
    from experiments.term_weights import TermGroup, learn_term_weights

    train, dev, test_input = _sets()
    bundle = Bundle.load(args.bundle)
    pipeline, idf = idf_pipeline(bundle, _posts(train, dev, test_input))
    g_train, m_train = _groups(bundle, pipeline, idf, train, True)
    g_dev, _ = _groups(bundle, pipeline, idf, dev, True)
    fit = choose_fusion(g_train, m_train, "MAP", grid_title=GRID_TITLE)
    f = fit.fusion
    base_ap = per_question(g_dev, f, dev)
    base = np.array(list(base_ap.values()))
    print(f"# bundle {bundle.version}; fusion chosen on train with IDF: {f} (train MAP {fit.dev:.2f})")
    print(f"IDF                      dev MAP {base.mean():.2f}")
    term_groups = []
    for g, q in zip(g_train, train.questions, strict=True):
        no_bow = {**f, "beta_bow": 0.0}
        offset = fused_scores(g.cos_bow, g.cos_dense, minmax_normalise(g.lexical), no_bow, g.cos_title)
        term_groups.append(TermGroup(_tf(pipeline, q.post), tuple(_tf(pipeline, r.post) for r in q.related),
                                     np.asarray([bool(r.relevant) for r in q.related]), offset))
    for l2, epochs in itertools.product(args.l2, args.epochs):
        t = learn_term_weights(term_groups, idf, f["beta_bow"], epochs=epochs, lr=args.lr, l2=l2)
        moved = float(np.mean(np.abs(t - idf)))
        d_ap = per_question(_with_bow(g_dev, dev, pipeline, t), f, dev)
        test = paired_randomisation_test(base, list(d_ap.values()))
        refit = choose_fusion(_with_bow(g_train, train, pipeline, t), m_train, "MAP", grid_title=GRID_TITLE)
        r_ap = per_question(_with_bow(g_dev, dev, pipeline, t), refit.fusion, dev)
        test_r = paired_randomisation_test(base, list(r_ap.values()))
        print(f"learned t l2={l2:g} epochs={epochs:<4d} (mean |t-idf| {moved:.3f}): same fusion dev MAP "
              f"{test.mean_b:.2f} ({test.mean_difference:+.2f}, p={test.p_value:.3f}, {test.wins}/{test.losses}); "
              f"fusion re-chosen on train {refit.fusion} dev MAP {test_r.mean_b:.2f} "
              f"({test_r.mean_difference:+.2f}, p={test_r.p_value:.3f})")


if __name__ == "__main__":
    main()
