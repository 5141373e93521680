"""What one `semdup learn` training step costs per recipe variant, on a set's first fold side (issue #44).

A step is timed as the budget plans it (:func:`semdup.training.learn.trainer.step_seconds`: the median of a few
steps on a throwaway model, after one), with the frozen bottom's states of its first batches computed beforehand, so
only the trainable layers are timed. Each variant is a JSON object of :class:`LearnSettings` fields over the
defaults; ``{"train_len": 0}`` is the whole post::

    python -m experiments.learn_steps --data semeval '{"train_len": 0}' '{}' '{"train_len": 64}'
    python -m experiments.learn_steps --data artifacts/site-dump '{"train_len": 0}' '{"train_len": 128}' '{}'

Time the variants in one call on a quiet machine: the ratios between them are what this measures.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace


def main(argv: list[str] | None = None) -> None:
    from semdup.data.learn_folds import fold_supervision
    from semdup.data.learn_sets import LEARN_SETS, named_supervision
    from semdup.data.supervision import load_supervision
    from semdup.learn.out_of_fold import side_data
    from semdup.training.learn.frozen import FrozenPrefix
    from semdup.training.learn.settings import LearnSettings
    from semdup.training.learn.trainer import _batch_at, step_seconds

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="a bundled set's name (semeval, travel, askubuntu) or a dump's path")
    ap.add_argument("--steps", type=int, default=4, help="steps timed per variant, after a first one")
    ap.add_argument("variants", nargs="+", help='LearnSettings fields as JSON, e.g. \'{"train_len": 96}\'')
    args = ap.parse_args(argv)
    if args.data in LEARN_SETS:
        named = named_supervision(args.data)
        sup, exclude = named.supervision, sorted(named.exclude)
    else:
        sup, exclude = load_supervision(args.data), []
    cut = fold_supervision(sup, 2, exclude)
    for variant in args.variants:
        settings = replace(LearnSettings(), **json.loads(variant))
        data = side_data(cut.kind, cut.folds[0].train, settings)
        prefix = FrozenPrefix.for_settings(settings, "cpu")
        lengths = sorted(len(prefix.tokens(g.query)) for g in data.groups[:300])
        for k in range(args.steps + 1):
            prefix.states([p for g in _batch_at(data, settings, k) for p in (g.query, g.positive, *g.negatives)])
        seconds = step_seconds(settings, data, prefix, "cpu", 2, steps=args.steps)
        print(f"{variant}: {len(data.groups)} groups, {settings.steps_per_epoch(len(data.groups))} steps a pass, "
              f"median query {lengths[len(lengths) // 2]} wordpieces, a step {seconds:.2f} s", flush=True)


if __name__ == "__main__":
    main()
