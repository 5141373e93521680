"""Issue #24 research: ``semdup learn``'s out-of-fold figures under a recipe, K and a share of the training links.

Run from the repository root::

    python -m experiments.learn_oof --data semeval --folds 2 --epochs 1 --out artifacts/research/oof/NAME
    python -m experiments.learn_oof --data semeval --folds 2 --train-share 0.25 --out ...   # the links curve
    python -m experiments.learn_oof --data semeval --folds-by cluster --set freeze_layers=4 --out ...  # issue #33

It runs :func:`semdup.learn.learned_bundle.judge_learning` (the bundle to beat, K fold models, the candidates and
the gate, everything before the final model) on the bundled set's labelled queries (never its test side) and
appends one line to ``artifacts/research/oof.jsonl``: the command, the recipe, the pooled and per-fold figures,
the choice, the gate, and wall / CPU seconds with the load average; every system's per-query figures go to
``<out>/per-query.json`` (to weigh other choice rules on the same scores). ``--folds-by cluster`` cuts SemEval by
duplicate cluster as issue #24 did (its figures are the baseline of the recipe's speed ideas) instead of by its
source files. ``--train-share s`` trains each fold model on
a share ``s`` of its training side's clusters (a fixed hash) while every labelled query is still judged: the
curve of links against quality over the same queries. Test is never read here.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import zlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

RUNS = Path("artifacts/research/oof.jsonl")


def _thin(kind: str, side: Any, share: float) -> Any:
    """``side`` with only the clusters whose hash falls below ``share`` (the same ones for every recipe)."""
    from semdup.data.learn_folds import TRAIN, _dump_side
    from semdup.data.semeval import SemEvalSet
    from semdup.data.supervision import clusters

    def keep(ids: Sequence[str]) -> bool:
        return zlib.crc32(f"thin:{min(ids)}".encode()) % 10000 < share * 10000

    if kind == "rerank":
        return SemEvalSet(side.name + f":{share}", tuple(q for q in side.questions if keep([q.post.id])))
    if kind == "pairs":
        of = clusters((p.query.id, p.candidate.id) for p in side)
        return tuple(p for p in side if keep(sorted(of[p.query.id])))
    dump, split = side
    of = clusters(dump.duplicate_links)
    splits = {pid: s for pid, s in dump.splits.items()
              if s != TRAIN or keep(sorted(of.get(pid, frozenset({pid}))))}  # the held side stays whole
    return (_dump_side(dump, splits), split)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", choices=("semeval", "travel", "askubuntu"), required=True)
    ap.add_argument("--out", required=True, help="the work folder (fold checkpoints: a rerun resumes)")
    ap.add_argument("--folds", type=int, default=2)
    ap.add_argument("--train-share", type=float, default=1.0)
    ap.add_argument("--folds-by", choices=("rule", "cluster"), default="rule",
                    help="rule: the first field that separates the labels (semdup learn's); cluster: by hash")
    ap.add_argument("--base-bundle", default="artifacts/bundles/minilm")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a LearnSettings field (repeatable), e.g. --set epochs=1 --set max_len=128")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    from semdup.data.learn_folds import fold_supervision
    from semdup.data.learn_sets import named_supervision
    from semdup.learn.learned_bundle import Phases, judge_learning
    from semdup.training.learn.settings import LearnSettings
    from semdup.training.loop import resolve_device

    fields = LearnSettings.__dataclass_fields__
    given = {}
    for item in args.set:
        name, value = item.split("=", 1)
        kind = type(getattr(LearnSettings(), name)) if name in fields else str
        given[name] = value if kind is str else (value.lower() == "true" if kind is bool else kind(value))
    settings = LearnSettings(**given)
    device = resolve_device(args.device)
    named = named_supervision(args.data)
    if args.folds_by == "cluster":
        if named.supervision.kind != "rerank":
            raise SystemExit("--folds-by cluster is for SemEval (the other sets have no field other than time)")
        named = replace(named, supervision=replace(named.supervision, sources=()))
    cut = fold_supervision(named.supervision, args.folds, named.exclude)
    if args.train_share < 1.0:
        cut = replace(cut, folds=tuple(replace(f, train=_thin(cut.kind, f.train, args.train_share))
                                       for f in cut.folds))
    load0, t0, c0 = os.getloadavg(), time.time(), time.process_time()
    phases = Phases()
    j = judge_learning(named.supervision, args.base_bundle, Path(args.out), settings, cut, named.corpus,
                       device=device, threads=args.threads, show_progress=False, phases=phases)
    (Path(args.out) / "per-query.json").write_text(json.dumps(j.per_query), encoding="utf-8")
    record = {
        "command": "python -m experiments.learn_oof " + " ".join(sys.argv[1:] if argv is None else argv),
        "data": args.data, "folds": args.folds, "folds_by": args.folds_by, "train_share": args.train_share,
        "settings": settings.to_json(),
        "device": device, "report": cut.report.to_json(), "figures": j.figures, "per_fold": j.per_fold,
        "chosen": j.chosen, "fusion": j.fit.fusion, "choices": {k: t.to_json() for k, t in j.choices.items()},
        "gate": j.decision.to_json(), "phases": dict(phases.seconds),
        "fold_steps": [r.summary.steps for r in j.fold_runs], "wall_s": round(time.time() - t0, 1),
        "cpu_s": round(time.process_time() - c0, 1), "load_before": load0, "load_after": os.getloadavg(),
    }
    RUNS.parent.mkdir(parents=True, exist_ok=True)
    with RUNS.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
    keys = ("figures", "chosen", "fusion", "fold_steps", "wall_s", "cpu_s", "phases")
    print(json.dumps({k: record[k] for k in keys}))
    print(j.decision.line())


if __name__ == "__main__":
    main()
