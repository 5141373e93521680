"""Issue #18: ``learn_bundle`` (semdup.export.learned_bundle) on the three shipped sets, dev as the held-out side.

Run from the repository root::

    python -m experiments.learn_sets --data semeval --out artifacts/learn/semeval [--budget 30] [recipe options]

The split is each set's protocol, not ``split_supervision``'s (so dev is the held-out side and test is never read):
SemEval: train parts 1 + 2 / the official dev (50 questions); Travel: the dump's train / dev splits (741 / 108
queries); AskUbuntu: the train pairs minus / plus the recipes' 20 % dev slice (crc32 of the query id). The bundle
to beat is the untrained default with its fusion fitted on the training side (what ``semdup fit-default`` now does),
written beside the candidate (``<work>/untrained-default``). Prints the outcome (gate decision, held-out figures,
wall and CPU seconds per phase, the load average) and appends it to ``artifacts/research/learn_sets.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

RUNS = Path("artifacts/research/learn_sets.jsonl")


def protocol_split(data: str):
    """(Supervision, LearnSplit) of a shipped set with its protocol's train / dev."""
    from semdup.data import SemEvalSet, load_semeval_xml
    from semdup.data.paths import askubuntu_files, semeval_files, semeval_train_files, travel_dir
    from semdup.data.stackexchange import load_stackexchange_dump
    from semdup.data.supervision import (
        Supervision,
        supervision_from_dump,
        supervision_from_pairs,
        supervision_from_semeval,
    )
    from semdup.data.supervision_split import LearnSplit, SplitReport
    from semdup.training.pairs import split_held_out

    if data == "semeval":
        train = supervision_from_semeval(semeval_train_files())
        dev = load_semeval_xml(*semeval_files("dev"), name="dev")
        sem = SemEvalSet("train+dev", train.data.questions + dev.questions)  # every post, for the IDF vocabulary
        sup = Supervision("rerank", sem, train.report)
        informative = lambda s: sum(1 for q in s.questions if any(r.relevant for r in q.related))  # noqa: E731
        report = SplitReport("protocol", informative(train.data), informative(dev), len(train.data.questions),
                             len(dev.questions))
        return sup, LearnSplit("rerank", train.data, dev, report)
    if data == "travel":
        dump = load_stackexchange_dump(travel_dir())  # with splits.tsv
        sup = supervision_from_dump(travel_dir())
        sup = Supervision("retrieval", dump, sup.report)
        report = SplitReport("protocol", len(dump.queries("train")), len(dump.queries("dev")), 270, 80)
        return sup, LearnSplit("retrieval", (dump, "train"), (dump, "dev"), report)
    pairs_sup = supervision_from_pairs(askubuntu_files()[0])
    fit, held = split_held_out(list(pairs_sup.data), key=lambda p: p.query.id, share=0.2)
    dup_q = lambda ps: len({p.query.id for p in ps if p.duplicate})  # noqa: E731
    report = SplitReport("protocol", dup_q(fit), dup_q(held), len(fit), len(held))
    return pairs_sup, LearnSplit("pairs", tuple(fit), tuple(held), report)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", choices=("semeval", "travel", "askubuntu"), required=True)
    ap.add_argument("--out", required=True, help="the candidate bundle; the work folder is OUT-work")
    ap.add_argument("--base-bundle", default="artifacts/bundles/minilm")
    ap.add_argument("--budget", type=float, default=30.0, help="wall-clock minutes for the whole call")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-title", action="store_true")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="LearnSettings field, e.g. --set epochs=1 --set symmetric=true")
    args = ap.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from semdup.core.fusion_fit import GRID_TITLE
    from semdup.export.learned_bundle import learn_bundle
    from semdup.training.learn.settings import LearnSettings

    values = {}
    for item in args.sets:
        k, v = item.split("=", 1)
        values[k] = json.loads(v) if v not in ("minilm", "mpnet", "linear", "constant") else v
    settings = LearnSettings(**values)
    sup, split = protocol_split(args.data)
    corpus = []
    if args.data == "semeval":  # the unlabelled test input joins the IDF vocabulary, as semdup demo does
        from semdup.data import load_semeval_xml
        from semdup.data.paths import semeval_files

        test_input = load_semeval_xml(semeval_files("test")[0], name="test-input")
        corpus = [q.post for q in test_input.questions] + test_input.related_posts()
    load0 = os.getloadavg()
    t0 = time.time()
    out = learn_bundle(sup, args.out, args.base_bundle, args.out + "-work", settings, budget_minutes=args.budget,
                       split=split, corpus=corpus, threads=args.threads,
                       grid_title=(0.0,) if args.no_title else GRID_TITLE)
    record = {"command": "python -m experiments.learn_sets " + " ".join(sys.argv[1:]), **out.to_json(),
              "wall_s": round(time.time() - t0, 1), "load_before": load0, "load_after": os.getloadavg()}
    RUNS.parent.mkdir(parents=True, exist_ok=True)
    with RUNS.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
    print(out.summary.line())
    print(out.decision.line())
    print(json.dumps({"held_out": out.held_out_figures, "fusion": out.fusion, "seconds": out.seconds,
                      "cpu_seconds": out.cpu_seconds, "candidate": out.version, "compared_with": out.compared_with,
                      "load": [load0, os.getloadavg()]}, indent=1))


if __name__ == "__main__":
    main()
