"""The one rule for JSON that nests too deeply to be read, shared by every way a post comes in as JSON.

Python's ``json`` parser recurses once per nested array or object and gives up past the interpreter's recursion
limit (about 1,000 levels) with ``RecursionError``, which is not a ``JSONDecodeError``: a reader that catches only
the latter crashes on one such line. No post nests at all, so such input is bad input like any other, named and
refused with the same words everywhere: ``semdup index-posts --input`` skips the line (:func:`loads` here, through
:func:`semdup.data.reading.json_object`), and the HTTP service answers 422 ``json_too_deep`` (FastAPI parses the
body itself; :func:`semdup.apps.http` tells the case by :func:`is_too_deep` on the error's cause).

    >>> loads('{"id": "1"}')
    {'id': '1'}
    >>> try:
    ...     loads('[' * 5000 + ']' * 5000)
    ... except JsonTooDeep as exc:
    ...     print(exc)
    nests arrays or objects too deeply to be read (json gives up at about 1,000 levels)
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["TOO_DEEP", "TOO_DEEP_TYPE", "TOO_LONG_NUMBER", "TOO_LONG_NUMBER_TYPE", "JsonTooDeep", "loads",
           "is_too_deep", "is_too_long_number"]  # fmt: skip

TOO_DEEP = "nests arrays or objects too deeply to be read (json gives up at about 1,000 levels)"
TOO_DEEP_TYPE = "json_too_deep"  # the HTTP error item's type, and what a test looks for


# Python's int() refuses decimal strings past sys.get_int_max_str_digits() (4,300 digits) with a plain ValueError,
# not a JSONDecodeError: a body with such a number was answered as if it were not UTF-8 (issue #45).
TOO_LONG_NUMBER = "holds an integer too long to be read (over 4,300 digits)"
TOO_LONG_NUMBER_TYPE = "json_number_too_long"


def is_too_long_number(exc: BaseException | None) -> bool:
    """Whether ``exc`` is the parser refusing an integer longer than Python converts (:data:`TOO_LONG_NUMBER`)."""
    return type(exc) is ValueError and "integer string conversion" in str(exc)


class JsonTooDeep(ValueError):
    """JSON nested past what the parser reads (:data:`TOO_DEEP`); the message never quotes the input."""


def is_too_deep(exc: BaseException | None) -> bool:
    """Whether ``exc`` is the parser giving up on nesting (``RecursionError``) or :class:`JsonTooDeep`."""
    return isinstance(exc, (RecursionError, JsonTooDeep))


def loads(text: str) -> Any:
    """``json.loads``, with nesting past the parser's limit raised as :class:`JsonTooDeep`.

    Raises:
        json.JSONDecodeError: not JSON.
        JsonTooDeep: JSON nested too deeply to be read.
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise JsonTooDeep(TOO_DEEP) from None
