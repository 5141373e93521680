"""Labelled question pairs in JSONL: the AskUbuntu duplicate pairs and SemEval training part 1.

One JSON object per line: ``query{id,title,body}``, ``candidate{id,title,body}``, ``label``
(and ``search_rank`` in the SemEval file). Labels map to a duplicate flag:

==================  =========
label               duplicate
==================  =========
duplicate           True
non-duplicate       False
PerfectMatch        True      (SemEval: "PerfectMatch and Relevant count as relevant")
Relevant            True
Irrelevant          False
==================  =========

Example::

    >>> pairs = load_pairs_jsonl("/work/shared/data/askubuntu-pairs/test.pairs.jsonl")
    >>> len(pairs), sum(p.duplicate for p in pairs)
    (285, 147)
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from semdup.core.errors import DataError
from semdup.core.posts import Post
from semdup.data.reading import iter_jsonl

__all__ = ["PostPair", "load_pairs_jsonl", "PAIR_LABELS"]

logger = logging.getLogger(__name__)

# Every label a pair file may carry, and whether it means "duplicate / relevant".
PAIR_LABELS: dict[str, bool] = {
    "duplicate": True,
    "non-duplicate": False,
    "PerfectMatch": True,
    "Relevant": True,
    "Irrelevant": False,
}

_PAIR_FORMAT = "one JSON object per line with query{id,title,body}, candidate{id,title,body} and label"


@dataclass(frozen=True)
class PostPair:
    """A query post, a candidate post, and whether humans judged the candidate a duplicate."""

    query: Post
    candidate: Post
    duplicate: bool
    label: str


def _post_field(obj: dict[str, Any], key: str, path: Path, line_no: int) -> Post:
    """Build the Post stored under ``key`` (query / candidate) of one JSONL record."""
    rec = obj.get(key)
    if not isinstance(rec, dict):
        raise DataError(f"{path}: line {line_no}: field {key!r} is missing or not an object; expected {_PAIR_FORMAT}.")
    missing = [f for f in ("id", "title", "body") if f not in rec]
    if missing:
        raise DataError(f"{path}: line {line_no}: {key} lacks field(s) {', '.join(missing)}; expected {_PAIR_FORMAT}.")
    if rec["id"] is None or str(rec["id"]) == "":
        raise DataError(f"{path}: line {line_no}: {key}.id is empty; every post needs an id.")
    for f in ("title", "body"):
        if rec[f] is not None and not isinstance(rec[f], str):
            raise DataError(
                f"{path}: line {line_no}: {key}.{f} is {type(rec[f]).__name__}; expected a string (or null)."
            )
    return Post(id=str(rec["id"]), title=rec["title"] or "", body=rec["body"] or "")


def iter_pair_records(path: str | Path) -> Iterator[tuple[int, Post, Post, str, dict[str, Any]]]:
    """Yield ``(line_number, query, candidate, label, raw_object)`` for each record of a pair file.

    Raises:
        DataError: missing file, non-UTF-8 bytes, a line that is not JSON, a missing field or an
            unknown label (the message lists the accepted labels).
    """
    p = Path(path)
    for line_no, obj in iter_jsonl(p, _PAIR_FORMAT):
        query = _post_field(obj, "query", p, line_no)
        candidate = _post_field(obj, "candidate", p, line_no)
        label = obj.get("label")
        if label not in PAIR_LABELS:
            raise DataError(
                f"{p}: line {line_no}: label {label!r} is not one of {', '.join(PAIR_LABELS)}; "
                f"expected {_PAIR_FORMAT}."
            )
        yield line_no, query, candidate, label, obj


def load_pairs_jsonl(path: str | Path) -> list[PostPair]:
    """Load a labelled pair file (AskUbuntu, or SemEval part 1 read as flat pairs), in file order.

    Args:
        path: a ``*.pairs.jsonl`` file.

    Returns:
        One ``PostPair`` per line; ``duplicate`` follows ``PAIR_LABELS``.

    Raises:
        DataError: see ``iter_pair_records``.
    """
    pairs = [
        PostPair(query=q, candidate=c, duplicate=PAIR_LABELS[label], label=label)
        for _, q, c, label, _ in iter_pair_records(path)
    ]
    logger.info("Loaded %d pairs (%d duplicate) from %s", len(pairs), sum(p.duplicate for p in pairs), path)
    return pairs
