"""Posts from any input semdup indexes: JSONL posts, a SemEval-2016 XML file, or a Stack Exchange dump folder.

    posts = read_posts("posts.jsonl")                        # the format is told from the input itself
    posts = read_posts("/data/travel-stackexchange")         # a folder: a Stack Exchange dump
    posts = read_posts("questions.dat", fmt="jsonl")         # or named

The format is sniffed rather than taken from the file name alone: a folder is a dump, a file whose first
character is ``<`` is XML and one whose first character is ``{`` is JSONL; only where the content says neither
does the suffix decide (``.xml``, ``.jsonl``), so the loader can name the line at fault. Every loader keeps its
strict checks, and every failure is one ``DataError`` line naming the file.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from semdup.core.errors import DataError
from semdup.core.posts import Post
from semdup.data.reading import iter_jsonl, require_file
from semdup.data.semeval import load_semeval_xml
from semdup.data.stackexchange import load_stackexchange_dump

__all__ = ["read_posts", "sniff_format", "INPUT_FORMATS"]

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
                f"{p}: a Stack Exchange Posts.xml; pass the dump folder that holds it and PostLinks.xml ({p.parent})"
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


def read_posts(path: str | Path, fmt: str = "auto") -> list[Post]:
    """Every post of ``path``, in file order (a SemEval question that several threads repeat comes once).

    Args:
        path: a JSONL file (one ``{"id", "title", "body"}`` object per line), a SemEval-2016 Task 3 XML file (its
            original and related questions) or a Stack Exchange dump folder (``Posts.xml`` + ``PostLinks.xml``).
        fmt: one of :data:`INPUT_FORMATS`; ``auto`` sniffs it (:func:`sniff_format`).

    Raises:
        ValueError: an unknown ``fmt``.
        DataError: a missing, empty, non-UTF-8 or malformed input, or a JSONL post without an id.
    """
    if fmt not in INPUT_FORMATS:
        raise ValueError(f"unknown input format {fmt!r}; accepted: {', '.join(INPUT_FORMATS)}")
    p = Path(path)
    chosen = sniff_format(p) if fmt == "auto" else fmt
    if chosen == "stackexchange":
        posts = list(load_stackexchange_dump(p).posts.values())
    elif chosen == "semeval":
        posts = _semeval_posts(p)
    else:
        posts = _jsonl_posts(p)
    logger.info("read %d posts from %s (%s)", len(posts), p, chosen)
    return posts


def _semeval_posts(path: Path) -> list[Post]:
    sem = load_semeval_xml(path)
    seen: dict[str, Post] = {q.post.id: q.post for q in sem.questions}
    for post in sem.related_posts():
        seen.setdefault(post.id, post)
    return list(seen.values())


def _jsonl_posts(path: Path) -> list[Post]:
    posts = []
    for line_no, obj in iter_jsonl(require_file(path, "posts JSONL"), "posts with id, title and body"):
        if obj.get("id") in (None, ""):
            raise DataError(f"{path}: line {line_no}: a post without 'id'; every post needs a unique id")
        posts.append(Post.from_json(obj))
    return posts
