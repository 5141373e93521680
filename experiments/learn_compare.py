"""Issue #18 research: SemEval dev MAP of fine-tuned checkpoints, each against a reference, question by question.

Run from the repository root::

    python -m experiments.learn_compare --ref artifacts/research/R1_mask_s0 artifacts/research/R2_sym_s0 ...
    python -m experiments.learn_compare --group mask=R1_mask_s0,R4_mask_s1 --group sym=R2_sym_s0,R7_sym_s1

Dense scores only (each checkpoint's cosine through ``CheckpointScorer``), the official per-question AP
(``semdup.measures.ranking.semeval_average_precisions``) and the paired randomisation test of
``semdup.measures.significance``. With ``--group NAME=A,B,..`` (folders under artifacts/research/), each group's
per-question AP is the mean over its seeds, and every group is compared with the first. Test is never scored.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def dev_ap(checkpoint: str) -> dict[str, float]:
    from experiments.learn_fusion import _sets
    from semdup.measures.protocols import semeval_predictions
    from semdup.measures.ranking import semeval_average_precisions
    from semdup.training.checkpoint import CheckpointScorer

    _, dev, _ = _sets()
    return semeval_average_precisions(semeval_predictions(CheckpointScorer.from_dir(checkpoint), dev), dev.gold())


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoints", nargs="*")
    ap.add_argument("--ref", default=None)
    ap.add_argument("--group", action="append", default=[], help="NAME=RUN,RUN,... (folders under artifacts/research)")
    args = ap.parse_args(argv)
    import torch

    from semdup.measures.significance import paired_randomisation_test

    torch.set_num_threads(1)
    cache: dict[str, dict[str, float]] = {}

    def get(c: str) -> np.ndarray:
        if c not in cache:
            cache[c] = dev_ap(c)
        return np.array(list(cache[c].values()))

    if args.group:
        groups = {}
        for item in args.group:
            name, runs = item.split("=", 1)
            members = [str(Path("artifacts/research") / r) for r in runs.split(",")]
            groups[name] = (members, np.mean([get(m) for m in members], axis=0))
        first = next(iter(groups))
        for name, (members, ap_q) in groups.items():
            seeds = ", ".join(f"{get(m).mean():.2f}" for m in members)
            line = f"{name:12s} seeds [{seeds}] mean {ap_q.mean():.2f}"
            if name != first:
                t = paired_randomisation_test(groups[first][1], ap_q)
                line += (f"  vs {first}: {t.mean_difference:+.2f} (95% CI {t.ci_low:+.2f}..{t.ci_high:+.2f}, "
                         f"p={t.p_value:.3f}, {t.wins}/{t.losses}/{t.ties})")
            print(line, flush=True)
        return
    ref = get(args.ref) if args.ref else None
    for c in args.checkpoints:
        line = f"{c}: dev MAP {get(c).mean():.2f}"
        if ref is not None:
            t = paired_randomisation_test(ref, get(c))
            line += (f"  vs ref {t.mean_difference:+.2f} (95% CI {t.ci_low:+.2f}..{t.ci_high:+.2f}, "
                     f"p={t.p_value:.3f}, {t.wins}/{t.losses}/{t.ties})")
        print(line, flush=True)


if __name__ == "__main__":
    main()
