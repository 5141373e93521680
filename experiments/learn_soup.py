"""Issue #18 research: a "model soup" (Wortsman et al. 2022, uniform soup) of fine-tunes of one base encoder.

Run from the repository root::

    python -m experiments.learn_soup --out artifacts/research/SOUP \
        artifacts/research/R1_mask_s0 artifacts/research/R4_mask_s1

Fine-tunes that start from the same pre-trained weights with a small learning rate stay in one basin, so the mean of
their weights is itself a good model, often as good as the ensemble of their scores, and it costs one model at
serving time. Writes a checkpoint (the first input's config and vocabulary, the mean of the ``model.pt`` tensors)
and prints SemEval dev MAP of each input, of the soup, and of the score ensemble (mean cosine), with the paired
randomisation test of the soup against the inputs' mean per-question AP. Test is never scored.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoints", nargs="+")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    import torch

    from experiments.learn_fusion import _sets
    from semdup.measures.protocols import semeval_predictions
    from semdup.measures.ranking import semeval_average_precisions
    from semdup.measures.significance import paired_randomisation_test
    from semdup.training.checkpoint import CONFIG_FILE, VOCAB_FILE, WEIGHTS_FILE, CheckpointScorer

    states = [torch.load(Path(c) / WEIGHTS_FILE, map_location="cpu", weights_only=True) for c in args.checkpoints]
    soup = {k: (sum(s[k].double() for s in states) / len(states)).to(states[0][k].dtype)
            if states[0][k].is_floating_point() else states[0][k] for k in states[0]}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in (CONFIG_FILE, VOCAB_FILE):
        shutil.copy(Path(args.checkpoints[0]) / name, out / name)
    config = json.loads((out / CONFIG_FILE).read_text(encoding="utf-8"))
    config["soup"] = [str(c) for c in args.checkpoints]
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True), encoding="utf-8")
    torch.save(soup, out / WEIGHTS_FILE)
    torch.set_num_threads(1)
    _, dev, _ = _sets()
    gold = dev.gold()
    preds = {}
    for c in [*args.checkpoints, str(out)]:
        preds[c] = semeval_predictions(CheckpointScorer.from_dir(c), dev)
    ens = {q: {r: float(np.mean([preds[c][q][r] for c in args.checkpoints])) for r in preds[str(out)][q]}
           for q in preds[str(out)]}
    ap_of = {c: semeval_average_precisions(p, gold) for c, p in preds.items()}
    ap_ens = semeval_average_precisions(ens, gold)
    members = np.mean([list(ap_of[c].values()) for c in args.checkpoints], axis=0)
    for c in args.checkpoints:
        print(f"{c}: dev MAP {np.mean(list(ap_of[c].values())):.2f}")
    t_soup = paired_randomisation_test(members, list(ap_of[str(out)].values()))
    t_ens = paired_randomisation_test(members, list(ap_ens.values()))
    print(f"members' mean AP: dev MAP {members.mean():.2f}")
    print(f"soup {out}: dev MAP {t_soup.mean_b:.2f} ({t_soup.mean_difference:+.2f} vs members' mean, "
          f"p={t_soup.p_value:.3f}, {t_soup.wins}/{t_soup.losses})")
    print(f"score ensemble: dev MAP {t_ens.mean_b:.2f} ({t_ens.mean_difference:+.2f}, p={t_ens.p_value:.3f})")


if __name__ == "__main__":
    main()
