"""One rule for the index names semdup accepts from people: a single concrete index or alias, never a pattern.

OpenSearch reads ``*``, ``_all``, comma lists and ``-name`` exclusions as patterns over many indices, and names
that start with ``_`` as API endpoints (``_search``); a name that starts with ``.`` is a hidden or system index.
None of them holds posts, so semdup refuses them with one line before any request is sent, instead of letting
the cluster answer a 400 (a traceback) or, worse, search every index::

    >>> check_index_name("travel-posts")
    'travel-posts'
    >>> check_index_name("_all")
    Traceback (most recent call last):
    ...
    semdup.core.errors.ConfigError: index name '_all' must not start with '_' ...

The rules are OpenSearch's own for index names (``MetadataCreateIndexService.validateIndexOrAliasName``), plus
no leading ``.``; an alias must follow them too to be named here.
"""

from __future__ import annotations

from semdup.core.errors import ConfigError

__all__ = ["check_index_name", "MAX_INDEX_NAME_BYTES"]

MAX_INDEX_NAME_BYTES = 255
_FORBIDDEN = frozenset('\\/*?"<>| ,#:')
_HINT = "name one index or alias: lowercase letters, digits, '-', '_' and '.', not starting with '_', '-', '+' or '.'"


def check_index_name(name: str, what: str = "index name") -> str:
    """``name`` when it can only mean one index or alias; else a one-line ConfigError saying why.

    Args:
        name: the name given (``--index``, ``SEMDUP_INDEX``, a request's ``index``).
        what: how the message calls it (e.g. ``"SEMDUP_INDICES entry"``).

    Raises:
        ConfigError: empty, too long, a pattern or list (``*``, ``?``, ``,``), a path (``/``, ``..``), an API
            endpoint or exclusion (leading ``_``, ``-``, ``+``), a hidden or system index (leading ``.``), upper case,
            white space or control characters.
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{what} is empty; {_HINT}")
    shown = repr(name[:80] + ("..." if len(name) > 80 else ""))
    if len(name.encode("utf-8")) > MAX_INDEX_NAME_BYTES:
        raise ConfigError(f"{what} {shown} is longer than {MAX_INDEX_NAME_BYTES} bytes; {_HINT}")
    bad = sorted({c for c in name if c in _FORBIDDEN or not c.isprintable()})
    if bad:
        chars = "".join(bad)
        raise ConfigError(f"{what} {shown} holds {chars!r}, which OpenSearch reads as a pattern or path; {_HINT}")
    if name[0] in "_-+":
        raise ConfigError(f"{what} {shown} must not start with {name[0]!r} (an API endpoint or exclusion); {_HINT}")
    if name[0] == ".":
        raise ConfigError(f"{what} {shown} names a hidden or system index (leading '.'); {_HINT}")
    if name != name.lower():
        raise ConfigError(f"{what} {shown} has upper-case letters, which OpenSearch index names cannot; {_HINT}")
    return name
