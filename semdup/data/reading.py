"""File reading shared by the loaders: UTF-8 checked to the byte, XML and JSONL errors located.

The strict readers (``read_utf8_lines``, ``iter_jsonl``, ``iter_xml_elements``) turn every failure into one
``DataError`` line that names the file, the position (line, column or byte offset) and what was expected, so a
bad download is found at once and nothing is replaced or dropped silently. The line-at-a-time pieces
(``iter_lines``, ``decode_line``, ``json_object``) raise :class:`LineProblem` for one line instead, so a reader
of posts to index can skip that line, name it, and read the rest.
"""

from __future__ import annotations

import codecs
import json
import logging
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from semdup.core.errors import DataError
from semdup.core.json_input import JsonTooDeep, loads
from semdup.core.progress import progress

__all__ = [
    "require_file",
    "read_utf8_lines",
    "iter_jsonl",
    "iter_xml_elements",
    "require_attr",
    "LineProblem",
    "iter_lines",
    "decode_line",
    "json_object",
]

logger = logging.getLogger(__name__)

# Files above this size get a byte progress bar while they are parsed.
_PROGRESS_MIN_BYTES = 32 * 1024 * 1024
_CHUNK_BYTES = 1024 * 1024


def require_file(path: str | Path, what: str) -> Path:
    """Return ``path`` as a Path if it is a non-empty regular file, else raise ``DataError``.

    Args:
        path: the file to check.
        what: a few words saying what the file should hold, used in the message.
    """
    p = Path(path)
    if not p.exists():
        raise DataError(
            f"{p}: file not found; expected {what}. Check the path "
            "(the data sets live in shared/data beside the checkout, or set SEMDUP_DATA_DIR)."
        )
    if not p.is_file():
        raise DataError(f"{p}: is not a regular file; expected {what}.")
    if p.stat().st_size == 0:
        raise DataError(f"{p}: file is empty; expected {what}. Re-copy or re-download it.")
    return p


def _utf8_error(path: Path, offset: int, raw: bytes, exc: UnicodeDecodeError, where: str = "") -> DataError:
    bad = raw[exc.start : exc.start + 4].hex(" ")
    return DataError(
        f"{path}: {where}not valid UTF-8 at byte offset {offset} (bytes {bad}: {exc.reason}); "
        "expected UTF-8 text. Re-encode the file as UTF-8 (e.g. iconv -t UTF-8); nothing is replaced silently."
    )


class LineProblem(ValueError):
    """One line of a text file that cannot be read; the message says why without quoting the line."""


def iter_lines(path: Path, what: str) -> Iterator[tuple[int, int, bytes]]:
    """Yield ``(line_number, byte_offset, raw)`` of a file, 1-based, ``raw`` without its line ending.

    Raises:
        DataError: the file is missing, not a regular file, or empty (see :func:`require_file`).
    """
    require_file(path, what)
    offset = 0
    with path.open("rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            yield line_no, offset, raw.rstrip(b"\r\n")
            offset += len(raw)


def decode_line(raw: bytes) -> str:
    """One line as text, without a leading byte-order mark (on any line: files joined with ``cat`` keep theirs).

    Raises:
        LineProblem: ``not UTF-8 (byte 0xff at column 9)``, the column counted in bytes from 1.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LineProblem(f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})") from exc
    return text.removeprefix("\ufeff")


def json_object(text: str) -> dict[str, Any]:
    """One JSONL line as a JSON object.

    Raises:
        LineProblem: not JSON (with the column and json's reason), JSON nested too deeply to be read (the rule of
            :mod:`semdup.core.json_input`, which the HTTP service answers with 422 ``json_too_deep``), or JSON but
            not an object.
    """
    try:
        obj = loads(text)
    except json.JSONDecodeError as exc:
        raise LineProblem(f"not valid JSON at column {exc.colno} ({exc.msg})") from exc
    except JsonTooDeep as exc:
        raise LineProblem(f"JSON that {exc}") from None
    if not isinstance(obj, dict):
        kind = {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(obj), "number")
        raise LineProblem(f"a JSON {kind}, not an object")
    return obj


def read_utf8_lines(path: Path, what: str) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` of a UTF-8 text file, 1-based, without the line ending.

    A leading byte-order mark is dropped. Non-UTF-8 bytes raise ``DataError`` with the line, the column and the
    byte offset.
    """
    for line_no, offset, raw in iter_lines(path, what):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            where = f"line {line_no}, column {exc.start + 1}: "
            raise _utf8_error(path, offset + exc.start, raw, exc, where) from exc
        if line_no == 1 and text.startswith("\ufeff"):
            text = text[1:]
        yield line_no, text


def iter_jsonl(path: Path, what: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a JSONL file.

    Raises:
        DataError: a line that is not JSON, nested too deeply to be read, or not a JSON object; a file with no
            object at all.
    """
    seen = 0
    for line_no, text in read_utf8_lines(path, what):
        if not text.strip():
            continue
        try:
            obj = loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(
                f"{path}: line {line_no}, column {exc.colno}: not valid JSON ({exc.msg}); "
                f"expected one JSON object per line ({what})."
            ) from exc
        except JsonTooDeep as exc:
            raise DataError(
                f"{path}: line {line_no}: JSON that {exc}; expected one JSON object per line ({what})."
            ) from None
        if not isinstance(obj, dict):
            raise DataError(f"{path}: line {line_no}: expected a JSON object ({what}), found {type(obj).__name__}.")
        seen += 1
        yield line_no, obj
    if seen == 0:
        raise DataError(f"{path}: holds no JSON object (only blank lines); expected {what}.")


class _CheckedReader:
    """A binary file wrapper that validates UTF-8 as bytes pass through, for ``iterparse``.

    expat reports bad bytes only as "invalid token"; this reader names the byte offset instead.
    It also drives an optional progress bar.
    """

    def __init__(self, fh: IO[bytes], path: Path, bar: Any | None) -> None:
        self._fh = fh
        self._path = path
        self._bar = bar
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self._offset = 0

    def read(self, size: int = -1) -> bytes:
        raw = self._fh.read(size if size and size > 0 else _CHUNK_BYTES)
        try:
            self._decoder.decode(raw, final=not raw)
        except UnicodeDecodeError as exc:
            # exc.start indexes the decoder's buffer: pending bytes of a split character + this chunk.
            pending = exc.object[: len(exc.object) - len(raw)] if len(exc.object) > len(raw) else b""
            offset = self._offset - len(pending) + exc.start
            raise _utf8_error(self._path, offset, exc.object, exc) from exc
        self._offset += len(raw)
        if self._bar is not None:
            self._bar.update(len(raw))
        return raw


def iter_xml_elements(path: Path, tag: str, what: str) -> Iterator[ET.Element]:
    """Stream-parse an XML file and yield every completed element named ``tag``.

    Yielded elements are cleared after the caller is done with them and dropped from the root,
    so memory stays flat on a multi-gigabyte Stack Exchange dump. Take what you need from an
    element before asking for the next one.

    Raises:
        DataError: non-UTF-8 bytes (byte offset), malformed or truncated XML (line, column).
    """
    require_file(path, what)
    size = path.stat().st_size
    bar = (
        progress(total=size, unit="B", unit_scale=True, desc=path.name, leave=False)
        if size >= _PROGRESS_MIN_BYTES
        else None
    )
    try:
        with path.open("rb") as fh:
            root: ET.Element | None = None
            try:
                for event, elem in ET.iterparse(_CheckedReader(fh, path, bar), events=("start", "end")):
                    if root is None:
                        root = elem
                    if event == "end" and elem.tag == tag:
                        yield elem
                        elem.clear()
                        if root is not elem and len(root) and root[-1] is elem:
                            root.remove(elem)
            except ET.ParseError as exc:
                line, column = exc.position
                reason = str(exc).split(": line ")[0]
                raise DataError(
                    f"{path}: malformed or truncated XML at line {line}, column {column} ({reason}); "
                    f"expected {what}. Re-copy the file; a partial download ends mid-element."
                ) from exc
    finally:
        if bar is not None:
            bar.close()


def require_attr(elem: ET.Element, name: str, path: Path, context: str) -> str:
    """Return a required attribute of an XML element, or raise ``DataError`` naming it."""
    value = elem.get(name)
    if value is None or value == "":
        where = f" {context}" if context else ""
        raise DataError(f"{path}: a <{elem.tag}> element{where} lacks the required attribute {name}.")
    return value
