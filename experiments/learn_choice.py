"""Issue #33 research: which candidate and which gate the out-of-fold scores of a run support, under each rule.

Run from the repository root, on work folders that ``python -m experiments.learn_oof`` filled::

    python -m experiments.learn_choice artifacts/research/oof/semeval artifacts/research/oof/travel ...

Each folder's ``per-query.json`` holds every system's out-of-fold figure per labelled query (the bundle to beat,
the learned encoder alone, inside the bundle to beat's fusion, inside a fusion fitted on the fold models). Nothing
is trained or scored here: the rules are weighed on the same figures, and test is never read. Rules:

* ``p<0.05`` (issue #24): the hybrid if it beats the encoder alone at p < 0.05; the gate at p < 0.05;
* ``clear`` (issue #33, ``semdup learn``'s): a fusion candidate only if its gain over the encoder alone has p < 0.05
  and a 95 % interval above zero (the larger gain of two); the gate likewise.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from semdup.measures.significance import PairedTest, paired_randomisation_test


def _test(a: Mapping[str, float], b: Mapping[str, float]) -> PairedTest:
    common = [q for q in a if q in b]
    return paired_randomisation_test([a[q] for q in common], [b[q] for q in common])


def _clear(t: PairedTest) -> bool:
    return t.p_value < 0.05 and t.mean_difference > 0 and t.ci_low > 0


def decide(per_query: Mapping[str, Mapping[str, float]]) -> dict[str, object]:
    """Every candidate's figure, its test against the encoder alone, and what each rule chooses and gates."""
    enc = per_query["encoder"]
    vs_encoder = {n: _test(enc, per_query[n]) for n in ("carried", "hybrid")}
    old = "hybrid" if vs_encoder["hybrid"].p_value < 0.05 and vs_encoder["hybrid"].mean_difference > 0 else "encoder"
    clear = [n for n, t in vs_encoder.items() if _clear(t)]
    new = max(clear, key=lambda n: (vs_encoder[n].mean_difference, n == "carried")) if clear else "encoder"
    out: dict[str, object] = {n: round(sum(v.values()) / len(v), 2) for n, v in per_query.items()}
    for n, t in vs_encoder.items():
        out[f"{n}-vs-encoder"] = f"{t.mean_difference:+.2f} [{t.ci_low:+.2f}, {t.ci_high:+.2f}] p={t.p_value:.4f}"
    for rule, chosen in (("p<0.05", old), ("clear", new)):
        g = _test(per_query["current"], per_query[chosen])
        ok = g.p_value < 0.05 and g.mean_difference > 0 and (rule == "p<0.05" or g.ci_low > 0)
        out[rule] = (f"{chosen}: {g.mean_a:.2f} -> {g.mean_b:.2f} ({g.mean_difference:+.2f} [{g.ci_low:+.2f}, "
                     f"{g.ci_high:+.2f}] p={g.p_value:.4f}) {'accept' if ok else 'keep'}")
    for n in ("encoder", "carried", "hybrid"):
        g = _test(per_query["current"], per_query[n])
        out[f"{n}-vs-current"] = f"{g.mean_difference:+.2f} [{g.ci_low:+.2f}, {g.ci_high:+.2f}] p={g.p_value:.4f}"
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="work folders of experiments.learn_oof")
    args = ap.parse_args(argv)
    for run in args.runs:
        per_query = json.loads((run / "per-query.json").read_text(encoding="utf-8"))
        print(json.dumps({"run": str(run), **decide(per_query)}, indent=1))


if __name__ == "__main__":
    main()
