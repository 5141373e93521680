"""What ``semdup demo`` measured (:class:`DemoResult`) and its table, as the lines ``semdup demo`` prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["DemoResult", "LEARNED"]

LEARNED = "learned on the site"
TRAVEL_COLS = ("MAP", "MRR", "Acc@1", "Acc@5", "Acc@10")
SEMEVAL_COLS = ("MAP", "MRR", "P@1")
# the paper models are trained by their own commands (minutes to hours on CPU); the README rows hold the figures
PAPER_ROWS = (
    ("BOW-CNN", "Travel MAP 27.99 (semdup train --arch bow-cnn --data travel --threads 1); `--paper` reruns it here"),
    ("T-SCQA", "SemEval MAP 70.67 (python -m experiments.tscqa --checkpoint artifacts/scqa_rcnn/scqa-semeval ...)"),
    ("BOW-CNN", "AskUbuntu Acc 85.96 (semdup train --arch bow-cnn --data askubuntu --epochs 6)"),
)
PEER_NOTE = ("both base encoders (all-MiniLM-L6-v2, all-mpnet-base-v2) were trained by their authors on data that "
             "includes Stack Exchange duplicate pairs: every figure resting on them (default, peer) is flattered on "
             "these Stack Exchange sets")


def _cells(metrics: dict[str, float] | None, cols: tuple[str, ...]) -> str:
    if metrics is None:
        return "".join(f"{'-':>9}" for _ in cols)
    return "".join(f"{metrics[c]:9.2f}" for c in cols)


@dataclass
class DemoResult:
    """The demo's figures: ``rows`` (test) and ``dev`` map a method (``default``, ``peer``, a lexical model,
    :data:`LEARNED`, ...) to ``{"travel" | "semeval" | "askubuntu": {measure: percent}}``; ``notes`` are the lines
    printed under the table; ``stack`` what ``--review`` goes on with (client, environment, sets, bundles)."""

    rows: dict[str, dict[str, Any]]
    dev: dict[str, dict[str, Any]]
    notes: list[str]
    base_encoder: str
    skip_neural: bool
    paper: bool
    seconds: float = 0.0
    results_file: Path | None = None
    stack: dict[str, Any] = field(default_factory=dict, repr=False)

    def figure(self, method: str, data: str, measure: str) -> float | None:
        """One test figure (None when the run did not measure it): what ``semdup demo --check`` compares."""
        return self.rows.get(method, {}).get(data, {}).get(measure)

    def table_lines(self) -> list[str]:
        """The table ``semdup demo`` prints: test figures, the dev figures of the default and the peer, the notes,
        where the paper models' figures come from. Figures with Python's ``{:9.2f}`` (correctly rounded)."""
        labels = {"default": f"default (hybrid {self.base_encoder})", "peer": f"{self.base_encoder} alone (peer)"}
        head = ([f"T:{c}" for c in TRAVEL_COLS] + [f"S:{c}" for c in SEMEVAL_COLS] + ["A:Acc"])
        out = ["\nTest figures: T = Travel Stack Exchange test (231 queries, all 4,919 posts; Acc@k, MAP, MRR over "
               "the top 100), S = SemEval-2016 test (70 questions x 10 candidates, official MAP/MRR/P@1), "
               "A = AskUbuntu pairs (285 test pairs, threshold chosen on the 715 train pairs)"]
        out.append(f"{'method':<30}" + "".join(f"{h:>9}" for h in head))
        first = ("default", LEARNED, "peer")
        order = [n for n in first if n in self.rows] + [n for n in self.rows if n not in first]
        for name in order:
            r = self.rows[name]
            out.append(f"{labels.get(name, name):<30}" + _cells(r.get("travel"), TRAVEL_COLS)
                       + _cells(r.get("semeval"), SEMEVAL_COLS) + _cells(r.get("askubuntu"), ("Acc",)))
        if not self.skip_neural:
            out.append("\nDev (every choice made here; AskUbuntu: train pairs) for the default and the peer:")
            for name in ("default", "peer"):
                r = self.dev.get(name, {})
                out.append(f"{labels[name]:<30}" + _cells(r.get("travel"), TRAVEL_COLS)
                           + _cells(r.get("semeval"), SEMEVAL_COLS) + _cells(r.get("askubuntu"), ("Acc",)))
            out.append(f"\nNote: {PEER_NOTE}.")
        out.extend(self.notes)
        out.append("Paper models (not rerun by this demo" + (", except BOW-CNN on Travel above" if self.paper else "")
                   + "; figures and commands in the README):")
        out.extend(f"  {name}: {where}" for name, where in PAPER_ROWS)
        return out
