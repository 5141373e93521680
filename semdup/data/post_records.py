"""One record at a time from each input ``semdup index-posts`` reads: a post, or why the record holds none.

A record is a JSONL line, a question row of a Stack Exchange ``Posts.xml``, or an original or related question of a
SemEval-2016 XML file. Each is read on its own, so one bad record costs that record only: a line that is not UTF-8
(decoded line by line, so the problem is named by line and column rather than byte offset), not JSON, not an object
or without an id becomes a :class:`Record` with a ``problem`` and the reading goes on. What makes the whole file
unreadable (a missing file, XML that does not parse) still raises ``DataError`` from the readers of
:mod:`semdup.data.reading`, before anything is sent.

Only what a post needs is read: labels, ranks, comments and links are the evaluation loaders' business
(:mod:`semdup.data.semeval`, :mod:`semdup.data.stackexchange`), which stay strict for honest numbers. The id and
text rules (:mod:`semdup.core.post_rules`) are applied by the caller, :func:`semdup.data.posts_input.read_post_input`,
the same way for every format.
"""

from __future__ import annotations

import logging
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from semdup.core.posts import Post
from semdup.data.reading import LineProblem, decode_line, iter_lines, iter_xml_elements, json_object
from semdup.data.stackexchange import QUESTION_TYPE

__all__ = ["Record", "jsonl_records", "dump_records", "semeval_records", "RECORD_UNITS"]

logger = logging.getLogger(__name__)

# What one record is called, per format (the CLI says "2 lines skipped", "1 row skipped").
RECORD_UNITS = {"jsonl": ("line", "lines"), "stackexchange": ("row", "rows"), "semeval": ("question", "questions")}
_SHOWN = 80  # characters of an id a position repeats
_JSONL_WHAT = "JSONL posts (one {'id', 'title', 'body'} object per line)"


@dataclass(frozen=True)
class Record:
    """One record: ``where`` it is (``line 17``, ``row 5 (Id 12)``, ``RelQuestion Q1_R3``), and its ``post`` or
    the ``problem`` that left it without one (never both)."""

    where: str
    post: Post | None = None
    problem: str | None = None


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return "an array" if isinstance(value, list) else "an object"


def _jsonl_post(obj: dict[str, Any]) -> Post | str:
    """The post of one JSONL object, or why there is none. An integer id is taken as its decimal string (dumps
    exported as JSON often carry numeric ids); unknown fields are ignored."""
    if "id" not in obj:
        return "no 'id' field; every post needs a unique id"
    raw_id = obj["id"]
    if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)):
        return f"'id' is {_json_kind(raw_id)}; expected a string (or an integer)"
    for name in ("title", "body"):
        value = obj.get(name)
        if value is not None and not isinstance(value, str):
            return f"'{name}' is {_json_kind(value)}; expected a string"
    return Post(id=str(raw_id), title=obj.get("title") or "", body=obj.get("body") or "")


def jsonl_records(path: Path) -> Iterator[Record]:
    """Every non-blank line of a JSONL file as a record, line by line (blank lines are passed over).

    Raises:
        DataError: the file is missing or empty.
    """
    for line_no, _, raw in iter_lines(path, _JSONL_WHAT):
        if not raw.strip():
            continue
        where = f"line {line_no}"
        try:
            obj = json_object(decode_line(raw))
        except LineProblem as exc:
            yield Record(where, problem=str(exc))
            continue
        post = _jsonl_post(obj)
        yield Record(where, post=post) if isinstance(post, Post) else Record(where, problem=post)


def dump_records(dump_dir: Path) -> Iterator[Record]:
    """Every question row (``PostTypeId=1``) of a Stack Exchange dump folder's ``Posts.xml``, body as raw HTML.

    Rows are numbered from 1 among all rows of the file (answers too), so ``row 5`` is the fifth ``<row>``.
    ``PostLinks.xml`` is not read: indexing needs the posts only.

    Raises:
        DataError: Posts.xml is missing, empty, not UTF-8, or malformed XML (line, column).
    """
    path = dump_dir / "Posts.xml"
    what = "a Stack Exchange Posts.xml (<posts><row Id=... PostTypeId=... />) in the dump folder"
    for position, row in enumerate(iter_xml_elements(path, "row", what), start=1):
        if row.get("PostTypeId") != QUESTION_TYPE:
            continue  # answers, wiki pages...: not questions, not posts to index
        post_id = row.get("Id")
        if post_id is None:
            yield Record(f"row {position}", problem="no Id attribute")
            continue
        where = f"row {position} (Id {post_id[:_SHOWN]})"
        yield Record(where, post=Post(id=post_id, title=row.get("Title") or "", body=row.get("Body") or ""))


def _text(elem: ET.Element, child: str) -> str:
    node = elem.find(child)
    return (node.text or "") if node is not None else ""


def semeval_records(path: Path) -> Iterator[Record]:
    """Every original question and every related question of a SemEval-2016 Task 3 XML file, in file order.

    An original question comes once per thread in the official files; the repeats are records too (the caller
    keeps one of identical repeats).

    Raises:
        DataError: the file is missing, empty, not UTF-8, or malformed XML (line, column).
    """
    what = "SemEval-2016 Task 3 XML (<OrgQuestion> elements)"
    for position, org in enumerate(iter_xml_elements(path, "OrgQuestion", what), start=1):
        orgq_id = org.get("ORGQ_ID")
        if orgq_id is None:
            yield Record(f"OrgQuestion {position}", problem="no ORGQ_ID attribute")
            owner = f"OrgQuestion {position}"
        else:
            owner = f"OrgQuestion {orgq_id[:_SHOWN]}"
            yield Record(owner, post=Post(id=orgq_id, title=_text(org, "OrgQSubject"), body=_text(org, "OrgQBody")))
        for number, thread in enumerate(org.iter("Thread"), start=1):
            rel = thread.find("RelQuestion")
            relq_id = rel.get("RELQ_ID") if rel is not None else None
            if rel is None or relq_id is None:
                lacks = "no <RelQuestion>" if rel is None else "no RELQ_ID attribute"
                yield Record(f"Thread {number} of {owner}", problem=lacks)
                continue
            post = Post(id=relq_id, title=_text(rel, "RelQSubject"), body=_text(rel, "RelQBody"))
            yield Record(f"RelQuestion {relq_id[:_SHOWN]}", post=post)
