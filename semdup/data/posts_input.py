"""Posts from any input semdup indexes: JSONL posts, a SemEval-2016 XML file, or a Stack Exchange dump folder.

    read = read_post_input("posts.jsonl")                    # the format is told from the input itself
    read.posts, read.skipped                                 # the posts, and each record left out with why
    posts = read_posts("/data/travel-stackexchange")         # a folder: a Stack Exchange dump; strict
    posts = read_posts("questions.dat", fmt="jsonl")         # or named

The format is sniffed rather than taken from the file name alone: a folder is a dump, a file whose first
character is ``<`` is XML and one whose first character is ``{`` is JSONL; only where the content says neither
does the suffix decide (``.xml``, ``.jsonl``), so the reader can name the line at fault.

One bad record costs that record only. :func:`read_post_input` reads record by record
(:mod:`semdup.data.post_records`), applies the one rule set for ids and text (:mod:`semdup.core.post_rules`, the
same the HTTP API and the workers apply), and returns the posts with a :class:`Skipped` entry per record left out:
where it is (``line 17``, ``row 5 (Id 12)``, ``RelQuestion Q1_R3``) and why (``empty id``, ``not UTF-8 (byte 0xff
at column 9)``). A record that repeats an earlier one exactly is kept once; one that repeats an id with other text
is skipped (the first is kept, as ``POST /v1/posts`` refuses a batch naming one id twice). What makes the whole
input unreadable still raises one ``DataError`` line naming the file: a missing or empty file, unknown content,
XML that does not parse, or a file in which no record is a post at all (another kind of JSONL, say).
:func:`read_posts` is the strict fold for callers that must not go on with part of a file (``fit-default``'s
corpus): the first skipped record refuses the file.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from semdup.core.errors import DataError
from semdup.core.post_rules import post_problem
from semdup.core.posts import Post
from semdup.data.post_records import RECORD_UNITS, Record, dump_records, jsonl_records, semeval_records
from semdup.data.reading import require_file

__all__ = ["read_post_input", "read_posts", "sniff_format", "PostInput", "Skipped", "INPUT_FORMATS"]

logger = logging.getLogger(__name__)

INPUT_FORMATS = ("auto", "jsonl", "semeval", "stackexchange")
_EXPECTED = "JSONL posts (id, title, body), a SemEval-2016 XML file, or a Stack Exchange dump folder"
_SNIFF_BYTES = 4096
_XML_ROOT = re.compile(rb"<([A-Za-z_][\w:.-]*)")  # the first element (skips <?xml ...?>, <!-- -->, <!DOCTYPE>)
_SUFFIXES = {".xml": "semeval", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl"}


def sniff_format(path: str | Path) -> str:
    """The format of ``path``: ``stackexchange`` (a folder), ``semeval`` (XML) or ``jsonl``.

    Raises:
        DataError: the path is missing or empty, is a Stack Exchange ``Posts.xml`` given without its folder,
            or its content and name match no format.
    """
    p = Path(path)
    if p.is_dir():
        return "stackexchange"
    require_file(p, _EXPECTED)
    with p.open("rb") as fh:
        head = fh.read(_SNIFF_BYTES)
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if text.startswith(b"<"):
        root = _XML_ROOT.search(text)
        if root is not None and root.group(1) == b"posts":
            raise DataError(
                f"{p}: a Stack Exchange Posts.xml; pass the dump folder that holds it ({p.parent})"
            )
        return "semeval"
    if text.startswith(b"{"):
        return "jsonl"
    if p.suffix.lower() in _SUFFIXES:
        return _SUFFIXES[p.suffix.lower()]
    raise DataError(
        f"{p}: cannot tell its format (it starts with neither '{{' nor '<' and its name ends in neither .jsonl nor "
        f".xml); expected {_EXPECTED}"
    )


@dataclass(frozen=True)
class Skipped:
    """A record left out: where it is, why, and its post id when it has one (for the log: ids only, no text)."""

    where: str
    reason: str
    post_id: str | None = None

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


@dataclass(frozen=True)
class PostInput:
    """What :func:`read_post_input` read: the posts in file order, each record it ``skipped``, and how many records
    repeated an earlier one exactly (``repeats``, kept once)."""

    path: Path
    fmt: str
    posts: list[Post]
    skipped: list[Skipped] = field(default_factory=list)
    repeats: int = 0

    def units(self, n: int) -> str:
        """``n`` records in this format's word: ``1 line``, ``2 rows``, ``3 questions``."""
        one, many = RECORD_UNITS[self.fmt]
        return f"{n} {one if n == 1 else many}"


_RECORDS: dict[str, Callable[[Path], Iterator[Record]]] = {
    "jsonl": jsonl_records,
    "stackexchange": dump_records,
    "semeval": semeval_records,
}


def read_post_input(path: str | Path, fmt: str = "auto") -> PostInput:
    """Every usable post of ``path``, in file order, and every record left out with where and why.

    Args:
        path: a JSONL file (one ``{"id", "title", "body"}`` object per line), a SemEval-2016 Task 3 XML file (its
            original and related questions) or a Stack Exchange dump folder (its ``Posts.xml`` questions).
        fmt: one of :data:`INPUT_FORMATS`; ``auto`` sniffs it (:func:`sniff_format`).

    Raises:
        ValueError: an unknown ``fmt``.
        DataError: the input as a whole cannot be read: missing or empty, unknown content, malformed XML, or no
            record holds a post (nothing is returned in part then).
    """
    if fmt not in INPUT_FORMATS:
        raise ValueError(f"unknown input format {fmt!r}; accepted: {', '.join(INPUT_FORMATS)}")
    p = Path(path)
    chosen = sniff_format(p) if fmt == "auto" else fmt
    if chosen == "stackexchange" and not p.is_dir():
        raise DataError(f"{p}: not a directory; expected a Stack Exchange dump folder holding Posts.xml")
    posts: list[Post] = []
    skipped: list[Skipped] = []
    first: dict[str, tuple[str, Post]] = {}
    repeats = records = with_post = 0
    for rec in _RECORDS[chosen](p):
        records += 1
        if rec.post is None:
            skipped.append(Skipped(rec.where, rec.problem or "no post"))
            continue
        with_post += 1
        post = rec.post
        problem = post_problem(post)
        if problem is None and post.id in first:
            where, earlier = first[post.id]
            if earlier == post:
                repeats += 1
                continue
            problem = f"id repeats {where} with other text (the first is kept)"
        if problem is not None:
            skipped.append(Skipped(rec.where, problem, post.id))
            continue
        first[post.id] = (rec.where, post)
        posts.append(post)
    read = PostInput(path=p, fmt=chosen, posts=posts, skipped=skipped, repeats=repeats)
    if not with_post:
        found = f", first: {skipped[0]}" if skipped else ""
        raise DataError(f"{p}: no post in it ({read.units(records)} read{found}); expected {_EXPECTED}")
    _log(read)
    return read


def _log(read: PostInput) -> None:
    for s in read.skipped:
        logger.info("%s: %s skipped (post id %r): %s", read.path, s.where, (s.post_id or "")[:80], s.reason)
    if read.skipped:
        logger.warning(
            "%s: %s skipped, %d posts read (first skipped: %s); each skipped record is logged at INFO",
            read.path,
            read.units(len(read.skipped)),
            len(read.posts),
            read.skipped[0],
        )
    else:
        logger.info("read %d posts from %s (%s)", len(read.posts), read.path, read.fmt)


def read_posts(path: str | Path, fmt: str = "auto") -> list[Post]:
    """Every post of ``path``, in file order, or an error for the first record that cannot be used.

    The strict fold of :func:`read_post_input`, for callers that must not go on with part of a file.

    Raises:
        ValueError: an unknown ``fmt``.
        DataError: as :func:`read_post_input`, and any record it would skip (the first is named, the rest counted).
    """
    read = read_post_input(path, fmt)
    if read.skipped:
        raise DataError(
            f"{read.path}: {read.skipped[0]} ({read.units(len(read.skipped))} cannot be used in all; "
            "`semdup index-posts` skips such records and lists each)"
        )
    return read.posts
