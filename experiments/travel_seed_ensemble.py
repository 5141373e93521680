"""Travel: a seed ensemble of checkpoints (mean of their fused scores), by the official Travel protocol.

EVALUATION EXPERIMENT, not a shippable model: serving holds one checkpoint, and K checkpoints cost K
encoders per post. It measures how much of a single BOW-CNN run's dev/test figure is seed luck, next to
what one averaged-weights checkpoint (``semdup train --ema-decay``) gives.

Run::

    python -m experiments.travel_seed_ensemble \\
        --checkpoint artifacts/travel-tuning/B0_s1 --checkpoint artifacts/travel-tuning/B0_s2 ... [--split test]

Each checkpoint alone and the mean of all are scored with
:func:`semdup.measures.protocols.eval_travel` (exhaustive retrieval over all 4,919 posts,
the query removed, Acc@1/5/10, MAP and MRR over the top 100), the same code that chose every checkpoint.
The ensemble has no free parameter (equal weights, every checkpoint given), so nothing is chosen on test.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

import numpy as np

from semdup.core.errors import ConfigError
from semdup.core.posts import Post

__all__ = ["MeanScorer", "main"]

logger = logging.getLogger(__name__)

MEASURES = ("Acc@1", "Acc@5", "Acc@10", "MAP", "MRR")


class MeanScorer:
    """A :class:`~semdup.core.scoring.PostScorer` whose score is the mean of its members' scores."""

    def __init__(self, members: Sequence[object]) -> None:
        if not members:
            raise ConfigError("a mean of scorers needs at least one member; give --checkpoint DIR")
        self.members = list(members)

    def score(self, query: Post, candidates: Sequence[Post], lexical: Sequence[float] | None = None) -> np.ndarray:
        return np.mean([m.score(query, candidates, lexical) for m in self.members], axis=0)

    def score_matrix(self, queries: Sequence[Post], corpus: Sequence[Post]) -> np.ndarray:
        total: np.ndarray | None = None
        for m in self.members:
            s = np.asarray(m.score_matrix(queries, corpus), dtype=np.float64)
            total = s if total is None else total + s
        assert total is not None
        return total / len(self.members)


def fmt(m: dict[str, float]) -> str:
    """Acc@1 / Acc@5 / Acc@10 / MAP / MRR with two decimals."""
    return " / ".join(f"{m[k]:.2f}" for k in MEASURES)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", action="append", required=True, help="a checkpoint directory (repeat it)")
    ap.add_argument("--split", action="append", choices=("dev", "test"), help="default: dev only")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    import torch

    from semdup.data import load_stackexchange_dump
    from semdup.data.paths import travel_dir
    from semdup.measures.protocols import eval_travel
    from semdup.training.checkpoint import CheckpointScorer
    from semdup.training.fusion_choice import MemoisedScorer

    torch.set_num_threads(args.threads)
    dump = load_stackexchange_dump(travel_dir())
    members = [MemoisedScorer(CheckpointScorer.from_dir(d)) for d in args.checkpoint]  # corpus encoded once each
    splits = args.split or ["dev"]
    print(f"# Travel seed ensemble (evaluation experiment); {' | '.join(splits)}: {' / '.join(MEASURES)}")
    for d, m in zip(args.checkpoint, members, strict=True):
        print(f"{d:<48}" + "   ".join(f"{s} {fmt(eval_travel(m, dump, s))}" for s in splits))
    mean = MeanScorer(members)
    print(f"{f'mean of {len(members)}':<48}" + "   ".join(f"{s} {fmt(eval_travel(mean, dump, s))}" for s in splits))


if __name__ == "__main__":
    main()
