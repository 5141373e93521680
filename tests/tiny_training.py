"""Scaffolding shared by the tiny per-architecture training runs: a real SemEval slice, a random-ranking
reference, and one call that trains and evaluates. Each test keeps its own settings and assertions."""

from __future__ import annotations

import random
from functools import lru_cache
from pathlib import Path
from typing import Any

from semdup.data.paths import default_data_dir

SEMEVAL = default_data_dir() / "semeval2016-task3" / "official"


@lru_cache(maxsize=1)
def semeval_train_and_dev() -> tuple[Any, Any]:
    """Official train part 2 (67 questions) and dev with its gold labels."""
    from semdup.data import load_semeval_xml

    train_set = load_semeval_xml(SEMEVAL / "SemEval2016-Task3-CQA-QL-train-part2.xml")
    dev = load_semeval_xml(
        SEMEVAL / "SemEval2016-Task3-CQA-QL-dev.xml", SEMEVAL / "SemEval2016-Task3-CQA-QL-dev.xml.subtaskB.relevancy"
    )
    return train_set, dev


def random_semeval_map(semeval_set: Any, repeats: int = 200, seed: int = 0) -> float:
    """Expected MAP of a random ranking, estimated by averaging shuffled rankings."""
    from semdup.measures.ranking import semeval_scores

    rng = random.Random(seed)
    total = 0.0
    for _ in range(repeats):
        preds = {q.post.id: {r.post.id: rng.random() for r in q.related} for q in semeval_set.questions}
        total += semeval_scores(preds, semeval_set.gold())["MAP"]
    return total / repeats


def tiny_semeval_run(settings: Any, out_dir: Path, negatives: int = 20) -> tuple[Any, Any]:
    """Train ``settings`` on train part 2 with early stopping on dev MAP; returns (TrainResult, dev set)."""
    from semdup.measures.protocols import eval_semeval
    from semdup.training.pairs import semeval_training_data
    from semdup.training.trainer import train

    train_set, dev = semeval_train_and_dev()
    data = semeval_training_data([train_set], negatives=negatives, seed=0)
    result = train(
        settings, data, lambda s: eval_semeval(s, dev), "MAP", out_dir, lambda s: {"dev": eval_semeval(s, dev)}
    )
    return result, dev
