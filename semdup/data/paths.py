"""Where the shipped real data sets live, so commands can say ``--set test`` instead of two long paths."""

from __future__ import annotations

import os
from pathlib import Path

from semdup.core.errors import ConfigError

__all__ = ["data_dir", "default_data_dir", "semeval_files", "semeval_train_files", "SEMEVAL_SETS", "travel_dir",
           "askubuntu_files"]

SEMEVAL_SETS = {
    "dev": (
        "official/SemEval2016-Task3-CQA-QL-dev.xml",
        "official/SemEval2016-Task3-CQA-QL-dev.xml.subtaskB.relevancy",
    ),
    "test": (
        "official/SemEval2016-Task3-CQA-QL-test-input.xml",
        "official/SemEval2016-Task3-CQA-QL-test.xml.subtaskB.relevancy",
    ),
}


def _candidates() -> list[Path]:
    env = os.environ.get("SEMDUP_DATA_DIR")
    repo = Path(__file__).resolve().parents[2]
    return ([Path(env)] if env else []) + [
        repo.parent / "shared" / "data",
        repo / "shared" / "data",
        Path.cwd() / "data",
    ]


def default_data_dir() -> Path:
    """Where the data sets are expected, for defaults: like :func:`data_dir` but never raises."""
    candidates = _candidates()
    return next((c for c in candidates if (c / "semeval2016-task3").is_dir()), candidates[0])


def data_dir() -> Path:
    """``SEMDUP_DATA_DIR``, else ``shared/data`` beside the checkout (the project's layout), else ./data."""
    candidates = _candidates()
    for c in candidates:
        if (c / "semeval2016-task3").is_dir():
            return c
    raise ConfigError(
        f"no data directory found (looked in {', '.join(str(c) for c in candidates)}); "
        "set SEMDUP_DATA_DIR to the folder holding semeval2016-task3/, travel-stackexchange/, askubuntu-pairs/"
    )


def semeval_files(name: str) -> tuple[Path, Path]:
    if name not in SEMEVAL_SETS:
        raise ValueError(f"unknown SemEval set {name!r}; accepted: {', '.join(SEMEVAL_SETS)}")
    base = data_dir() / "semeval2016-task3"
    xml, rel = SEMEVAL_SETS[name]
    return base / xml, base / rel


def semeval_train_files() -> tuple[Path, Path]:
    """SemEval-2016's training side: part 1 (pairs JSONL) and part 2 (official XML)."""
    base = data_dir() / "semeval2016-task3"
    return base / "train-part1.pairs.jsonl", base / "official" / "SemEval2016-Task3-CQA-QL-train-part2.xml"


def travel_dir() -> Path:
    return data_dir() / "travel-stackexchange"


def askubuntu_files() -> tuple[Path, Path]:
    base = data_dir() / "askubuntu-pairs"
    return base / "train.pairs.jsonl", base / "test.pairs.jsonl"
