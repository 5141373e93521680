"""Issue #18 research: the learn recipe on SemEval / Travel / AskUbuntu, every choice on dev.

Run from the repository root::

    python -m experiments.learn_research train --data semeval --out artifacts/research/NAME [recipe options]
    python -m experiments.learn_research train --data semeval --fold 0/2 --out ...     # train on half the originals

``train`` fine-tunes with :func:`semdup.training.learn.trainer.learn_encoder` on the data set's training side
(SemEval: train part 1 + part 2; Travel: the dump's train split; AskUbuntu: the train pairs minus the recipes'
20 % held-out slice), reports the dev figure before and after (and ``--eval-points`` checks between, which
choose nothing) and appends one line per run to ``artifacts/research/runs.jsonl`` (the command, the recipe, the
summary, the load average). ``--fold i/K`` trains on the originals outside fold i of K (crc32 of the id), so that
the fold's originals are held out from the encoder: their scores are out-of-fold, for fitting a fusion on
training queries. Test is never read here.
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
from pathlib import Path

logger = logging.getLogger(__name__)

RUNS = Path("artifacts/research/runs.jsonl")


def fold_of(key: str, k: int) -> int:
    """The fold (0..k-1) of an original / query id: crc32, so the same everywhere."""
    return zlib.crc32(f"fold:{key}".encode()) % k


def _semeval(fold: tuple[int, int] | None, hard: int, seed: int):
    from semdup.data import SemEvalSet
    from semdup.measures.protocols import eval_semeval
    from semdup.training.learn.data import learn_data_from_semeval
    from semdup.training.recipes import DataPaths, _load_semeval

    paths = DataPaths.defaults("semeval")
    train_sets = [_load_semeval(p, gold=False) for p in paths.train]
    dev = _load_semeval(paths.dev, gold=True)
    if fold is not None:
        i, k = fold
        train_sets = [SemEvalSet(s.name, tuple(q for q in s.questions if fold_of(q.post.id, k) != i))
                      for s in train_sets]
    data = learn_data_from_semeval(train_sets, hard_negatives=hard, seed=seed)
    return data, (lambda scorer: eval_semeval(scorer, dev)), "MAP"


def _travel(hard: int, seed: int):
    from semdup.data import load_stackexchange_dump
    from semdup.data.paths import travel_dir
    from semdup.measures.protocols import eval_travel
    from semdup.training.learn.data import learn_data_from_dump

    dump = load_stackexchange_dump(travel_dir())
    data = learn_data_from_dump(dump, "train", hard_negatives=hard, seed=seed)
    return data, (lambda scorer: eval_travel(scorer, dump, "dev")), "MAP"


def _askubuntu(hard: int, seed: int):
    from semdup.data import load_pairs_jsonl
    from semdup.data.paths import askubuntu_files
    from semdup.measures.protocols import eval_pairs
    from semdup.training.learn.data import learn_data_from_pairs
    from semdup.training.pairs import split_held_out

    pairs = load_pairs_jsonl(askubuntu_files()[0])
    fit, held = split_held_out(pairs, key=lambda p: p.query.id, share=0.2)  # the recipes' dev slice
    data = learn_data_from_pairs(fit, hard_negatives=hard, seed=seed)
    return data, (lambda scorer: eval_pairs(scorer, held)), "accuracy"


def train_cmd(args: argparse.Namespace) -> None:
    from semdup.training.learn.settings import LearnSettings
    from semdup.training.learn.trainer import learn_encoder

    settings = LearnSettings(
        base_encoder=args.base_encoder, max_len=args.max_len, freeze_layers=args.freeze_layers, lr=args.lr,
        warmup_share=args.warmup, decay=args.decay, batch_size=args.batch_size, hard_negatives=args.hard_negatives,
        epochs=args.epochs, symmetric=args.symmetric, mask_known=not args.no_mask, scale=args.scale,
        ema_decay=args.ema_decay, seed=args.seed, chunk_size=args.chunk_size)
    fold = tuple(int(x) for x in args.fold.split("/")) if args.fold else None
    if args.data == "semeval":
        data, evaluate, metric = _semeval(fold, settings.hard_negatives, settings.seed)
    elif args.data == "travel":
        data, evaluate, metric = _travel(settings.hard_negatives, settings.seed)
    else:
        data, evaluate, metric = _askubuntu(settings.hard_negatives, settings.seed)
    load_before = os.getloadavg()
    t0 = time.time()
    cpu0 = time.process_time()
    deadline = None if args.budget is None else time.monotonic() + args.budget * 60.0
    run = learn_encoder(settings, data, args.out, deadline=deadline, evaluate=evaluate, metric=metric,
                        eval_points=args.eval_points, threads=args.threads,
                        extra_config={"research": {"data": args.data, "fold": args.fold}})
    record = {
        "command": "python -m experiments.learn_research " + " ".join(sys.argv[1:]),
        "out": str(run.checkpoint_dir), "data": args.data, "fold": args.fold, "settings": settings.to_json(),
        "groups": len(data.groups), "summary": run.summary.to_json(), "wall_s": round(time.time() - t0, 1),
        "cpu_s": round(time.process_time() - cpu0, 1), "load_before": load_before, "load_after": os.getloadavg(),
    }
    RUNS.parent.mkdir(parents=True, exist_ok=True)
    with RUNS.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
    print(run.summary.line())
    print(f"wall {record['wall_s']} s, process CPU {record['cpu_s']} s, load {load_before} -> {record['load_after']}")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="fine-tune with the learn trainer, dev before/after")
    t.add_argument("--data", choices=("semeval", "travel", "askubuntu"), required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--fold", default=None, help="i/K: leave fold i of K of the training originals out")
    t.add_argument("--base-encoder", default="minilm")
    t.add_argument("--max-len", type=int, default=256)
    t.add_argument("--freeze-layers", type=int, default=2)
    t.add_argument("--lr", type=float, default=2e-5)
    t.add_argument("--warmup", type=float, default=0.0)
    t.add_argument("--decay", default="constant", choices=("constant", "linear"))
    t.add_argument("--batch-size", type=int, default=32)
    t.add_argument("--hard-negatives", type=int, default=1)
    t.add_argument("--epochs", type=float, default=2.0)
    t.add_argument("--symmetric", action="store_true")
    t.add_argument("--no-mask", action="store_true", help="keep known duplicates in the in-batch softmax")
    t.add_argument("--scale", type=float, default=20.0)
    t.add_argument("--ema-decay", type=float, default=0.0)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--chunk-size", type=int, default=16)
    t.add_argument("--budget", type=float, default=1000.0, help="wall-clock minutes (a loaded machine)")
    t.add_argument("--eval-points", type=int, default=3)
    t.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.cmd == "train":
        train_cmd(args)


if __name__ == "__main__":
    main()
