"""The worker app of the composition root: it, not the indexer, names the task modules a worker loads; the indexer
names no package above it, even in a string import-linter cannot see."""

from __future__ import annotations

import ast
from pathlib import Path

import semdup
from semdup.core import task_names

ROOT = Path(semdup.__file__).parent


def test_the_worker_app_loads_the_indexer_and_the_alerts_tasks() -> None:
    from semdup.apps.worker import TASK_MODULES, app

    assert list(app.conf.include) == list(TASK_MODULES) == ["semdup.indexer.tasks", "semdup.alerts.tasks"]
    app.loader.import_default_modules()
    names = {task_names.INDEX_POSTS, task_names.BACKFILL_BATCH, task_names.SYNC_POSTS, task_names.DELETE_POSTS}
    assert names | {task_names.FLAG_DUPLICATES} <= set(app.tasks)


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """String constants of a module that are not docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def test_no_library_names_a_module_above_it_in_a_string() -> None:
    """A Celery ``include`` or an ``import_module`` by name is an import arrow import-linter cannot see."""
    above = {
        "indexer": ("semdup.alerts.", "semdup.review.", "semdup.apps."),
        "reranker": ("semdup.alerts.", "semdup.review.", "semdup.apps."),
        "alerts": ("semdup.review.", "semdup.apps."),
        "review": ("semdup.apps.",),
    }
    found = []
    for package, prefixes in above.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            found += [f"{path.relative_to(ROOT)}:{line}: {text}" for line, text in _code_strings(path)
                      if text.startswith(prefixes)]  # fmt: skip
    assert found == []
