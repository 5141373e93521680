"""Nothing below the composition root reads the environment: every setting comes through the one settings tree
(:mod:`semdup.apps.settings`), read once where a process starts, and is handed down as plain arguments.

An AST scan of every module in ``semdup/``: a read of ``os.environ`` (``.get``, ``[...]``, ``in``, ``.setdefault``,
``.pop``) or ``os.getenv`` fails the test. Passing the whole environment on to a child process (``{**os.environ,
...}``, ``os.environ.items()``) is not a read of a setting, and writing a variable for a child is not either.
"""

from __future__ import annotations

import ast
from pathlib import Path

import semdup

ROOT = Path(semdup.__file__).parent
# Where reading the environment is the job. Every other exception is named with its reason.
ALLOWED = {
    "apps/settings.py": "the settings module: the one reader of the environment and the config file",
    "data/paths.py": "SEMDUP_DATA_DIR: where the shared data sets are, for research and tests (no process root)",
    "core/model_files.py": "SEMDUP_CACHE: where downloads and unpacked models live, for training and the dev stack",
}
ALLOWED_DIRS = ("devstack/",)  # the embedded OpenSearch and Redis of local runs and tests, never a deployment


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)


def reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every read of the environment in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if f.attr == "getenv" and isinstance(f.value, ast.Name) and f.value.id == "os":
                found.append((node.lineno, "os.getenv"))
            if _is_environ(f.value) and f.attr in ("get", "setdefault", "pop", "__getitem__"):
                found.append((node.lineno, f"os.environ.{f.attr}"))
        if isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.ctx, ast.Load):
            found.append((node.lineno, "os.environ[...]"))
        if isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            found.append((node.lineno, "... in os.environ"))
    return found


def test_no_module_below_the_settings_reads_the_environment() -> None:
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ALLOWED or rel.startswith(ALLOWED_DIRS):
            continue
        for line, what in reads(ast.parse(path.read_text(encoding="utf-8"))):
            offenders.append(f"semdup/{rel}:{line}: {what}")
    assert not offenders, "read the setting through semdup.apps.settings instead:\n" + "\n".join(offenders)


def test_the_scan_finds_each_kind_of_read() -> None:
    code = (
        "import os\n"
        "a = os.environ.get('X')\n"
        "b = os.environ['Y']\n"
        "c = 'Z' in os.environ\n"
        "d = os.getenv('W')\n"
        "os.environ['V'] = '1'\n"  # a write: not a read
        "e = {**os.environ, 'U': '2'}\n"  # the environment passed on to a child: not a read
    )
    assert [what for _, what in reads(ast.parse(code))] == [
        "os.environ.get",
        "os.environ[...]",
        "... in os.environ",
        "os.getenv",
    ]
