"""Issue #18 research: where to fit the hybrid's fusion (β_bow, α, β_title) — on the 50 SemEval dev questions, or on
the 267 training originals (out-of-fold scores for a fine-tuned encoder) — judged on dev.

Run from the repository root::

    python -m experiments.learn_fusion --bundle artifacts/bundles/minilm
    python -m experiments.learn_fusion --bundle B --oof-bundle 0/2=B0 --oof-bundle 1/2=B1 --json out.json

For each fit set it builds the groups exactly as ``semdup fit-default`` does (``semdup.learn.default_bundle
.dev_groups``: cos_bow of IDF vectors, cos_dense, the raw BM25 score, the title vectors' cosine), chooses the
fusion on that set with ``semdup.learn.fusion_fit.choose_fusion`` (the same 486-point grid), and scores dev with
it. Fit sets: ``dev`` (what the packaged default does), ``train`` (the bundle's own scores on the training
originals: in-sample for a fine-tuned bundle), ``oof`` (each training original scored by the fold bundle that did
not see it: ``--oof-bundle i/K=PATH``, trained with ``learn_research train --fold i/K``), and ``dense`` (no fusion).
The IDF vocabulary is every SemEval text (train, dev and the unlabelled test input, as the demo's default); test is
never scored. The per-question dev APs go to ``--json`` for paired tests.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)


def _sets():
    from semdup.data import SemEvalSet, load_semeval_xml
    from semdup.data.paths import semeval_files
    from semdup.training.recipes import DataPaths, _load_semeval

    paths = DataPaths.defaults("semeval")
    train_sets = [_load_semeval(p, gold=False) for p in paths.train]
    train = SemEvalSet("train", tuple(q for s in train_sets for q in s.questions))
    dev = load_semeval_xml(*semeval_files("dev"), name="dev")
    test_input = load_semeval_xml(paths.test, None, name="test-input")  # text only, for the IDF vocabulary
    return train, dev, test_input


def _posts(*sets) -> list:
    out = {}
    for s in sets:
        for q in s.questions:
            out[q.post.id] = q.post
            out.update({r.post.id: r.post for r in q.related})
    return list(out.values())


def _groups(bundle, pipeline, idf, sem, title: bool):
    from semdup.learn.default_bundle import FitData, dev_groups

    groups, measure, _ = dev_groups(bundle, pipeline, idf, FitData(sem.name, "semeval", sem, []), title=title)
    return groups, measure


def per_question(groups, fusion, sem) -> dict[str, float]:
    from semdup.learn.fusion_fit import group_scores
    from semdup.measures.ranking import semeval_average_precisions

    return semeval_average_precisions(group_scores(groups, fusion), sem.gold())


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", required=True, help="the model's bundle (dense encoder)")
    ap.add_argument("--oof-bundle", action="append", default=[], help="i/K=PATH: the bundle trained without fold i")
    ap.add_argument("--no-title", action="store_true", help="grid without the title term")
    ap.add_argument("--json", default=None, help="write every variant's fusion, figures and per-question dev APs")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from experiments.learn_research import fold_of
    from semdup.bundle import Bundle
    from semdup.data import SemEvalSet
    from semdup.learn.default_bundle import idf_pipeline
    from semdup.learn.fusion_fit import GRID_TITLE, choose_fusion

    train, dev, test_input = _sets()
    bundle = Bundle.load(args.bundle)
    pipeline, idf = idf_pipeline(bundle, _posts(train, dev, test_input))
    title = not args.no_title
    grid_title = GRID_TITLE if title else (0.0,)
    dev_groups_, dev_measure = _groups(bundle, pipeline, idf, dev, title)
    fits = {"dev": (dev_groups_, dev_measure)}
    fits["train"] = _groups(bundle, pipeline, idf, train, title)
    if args.oof_bundle:
        groups, folds = [], set()
        for item in args.oof_bundle:
            spec, path = item.split("=", 1)
            i, k = (int(x) for x in spec.split("/"))
            folds.add(k)
            held = SemEvalSet(f"fold{i}", tuple(q for q in train.questions if fold_of(q.post.id, k) == i))
            groups += _groups(Bundle.load(path), pipeline, idf, held, title)[0]
        if len(folds) != 1 or len(args.oof_bundle) != folds.pop():
            raise SystemExit("give one --oof-bundle per fold i/K, i = 0..K-1")
        covered = SemEvalSet("oof", tuple(q for q in train.questions if q.post.id in {g.query_id for g in groups}))
        fits["oof"] = (groups, _measure_for(covered))
    rows = {}
    dense = {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.0}
    ap_dense = per_question(dev_groups_, dense, dev)
    rows["dense"] = {"fusion": dense, "fit": None, "dev": float(np.mean(list(ap_dense.values()))), "ap": ap_dense}
    for name, (groups, measure) in fits.items():
        fit = choose_fusion(groups, measure, "MAP", grid_title=grid_title)
        ap_q = per_question(dev_groups_, fit.fusion, dev)
        rows[name] = {"fusion": fit.fusion, "fit": fit.dev, "fit_queries": len(groups),
                      "dev": float(np.mean(list(ap_q.values()))), "ap": ap_q}
    print(f"# bundle {bundle.version}; title term {'on' if title else 'off'}; dev = SemEval-2016 dev (50 questions)")
    for name, r in rows.items():
        fit = "" if r["fit"] is None else f" fitted on {name} ({r['fit_queries']} queries, MAP there {r['fit']:.2f})"
        print(f"{name:6s} dev MAP {r['dev']:.2f}  fusion {r['fusion']}{fit}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"bundle": bundle.version, "rows": rows}, indent=1), encoding="utf-8")


def _measure_for(sem):
    from semdup.measures.ranking import semeval_scores

    gold = sem.gold()
    return lambda preds: semeval_scores(preds, gold)["MAP"]


if __name__ == "__main__":
    main()
