"""The README's demo figures as data (``figures.yaml``, package data) and their check against a run:
``semdup demo --check`` prints one OK / FAIL line per figure, so a figure that moved is named, not hidden."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

from semdup.demo.result import DemoResult

__all__ = ["Check", "check", "load_figures"]


@dataclass(frozen=True)
class Check:
    """One figure: ``expected`` as the README prints it, ``got`` as the run printed it (None: not measured)."""

    method: str
    data: str
    measure: str
    expected: str
    got: str | None
    status: str  # OK, FAIL, or SKIP (the row needs flags this run did not have, e.g. --learn)

    def line(self) -> str:
        return f"{self.status:<4} {self.method} {self.data} {self.measure}: expected {self.expected}, got {self.got}"


def load_figures() -> dict[str, Any]:
    """``figures.yaml``: ``columns`` (set, README header, measures) and ``rows`` (readme, method, command, figures)."""
    import yaml

    return yaml.safe_load(resources.files("semdup.demo").joinpath("figures.yaml").read_text(encoding="utf-8"))


def check(result: DemoResult, flags: set[str], figures: dict[str, Any] | None = None) -> list[Check]:
    """Every figure of the file against ``result``, printed as the demo prints it (``{:.2f}``). A row whose
    command has a flag not in ``flags`` (e.g. ``--learn``) is SKIP; a figure the run should have but lacks is FAIL."""
    figures = figures or load_figures()
    out = []
    for row in figures["rows"]:
        needs = set(row["command"].split()[2:])
        for col in figures["columns"]:
            for measure, expected in zip(col["measures"], row.get(col["set"], []), strict=False):
                value = result.figure(row["method"], col["set"], measure)
                got = None if value is None else f"{value:.2f}"
                status = "SKIP" if not needs <= flags else "OK" if got == expected else "FAIL"
                out.append(Check(row["method"], col["set"], measure, expected, got, status))
    return out
