"""Every experiment measures through semdup.core: no script keeps its own copy of a measure or protocol."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

EXPERIMENTS = Path(__file__).resolve().parents[3] / "experiments"
# Names the copies had (ranking_metrics, semeval_metrics, retrieval_metrics, best_threshold) and their kin.
MEASURE_NAME = re.compile(r"(_metrics$|^best_threshold$|average_precision|reciprocal_rank|^accuracy_at|_scores?_at$)")
MEASURING = ("minilm_peer", "semeval_fusion", "travel_fusion", "travel_seed_ensemble", "travel_ceiling")


def _tree(name: str) -> ast.Module:
    return ast.parse((EXPERIMENTS / f"{name}.py").read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", sorted(EXPERIMENTS.glob("*.py")), ids=lambda p: p.name)
def test_no_experiment_defines_a_measure(path: Path) -> None:
    defined = [n.name for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.FunctionDef)]
    assert [n for n in defined if MEASURE_NAME.search(n)] == []


@pytest.mark.parametrize("name", MEASURING)
def test_measuring_experiments_score_through_core_protocols(name: str) -> None:
    imported = {n.module for n in ast.walk(_tree(name)) if isinstance(n, ast.ImportFrom)}
    assert "semdup.measures.protocols" in imported


def test_peer_common_keeps_only_the_embedding_cache() -> None:
    import experiments._peer_common as common

    assert sorted(common.__all__) == ["CACHE", "cached_embeddings", "post_key"]
