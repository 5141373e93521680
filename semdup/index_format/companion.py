"""The companion index: semdup's side of an index that the site created and keeps writing to.

``semdup enable --index site-posts --title-field Title --body-field Body`` never touches the site's index. It
creates ``site-posts.semdup-<model>`` behind the alias ``site-posts.semdup``: a semdup index (the schema of
:mod:`semdup.index_format.schema`: the cleaned ``title``/``body``/``text`` under all six lexical models, and
``semdup.*``) keyed by the site's own ``_id``. Its ``_meta.semdup_source`` records where the text comes from
(the site's index or alias and its two field names). Workers read the posts from the site's index and write
the companion; the reranker, asked for ``site-posts``, searches the companion and answers the site's ids.

Why a companion rather than semdup's fields inside the site's documents (what ``enable`` did before), measured
by ``python -m benchmarks.footprint``: the site's own searches keep their response size (the
packed vectors in ``_source`` made 50 hits 4.3× larger), the site's full reindex or partial updates can never
erase or be erased by semdup's fields, a ``semdup`` name already in the site's mapping does not matter, the
candidate templates query semdup's analysed fields (so a rerank on an enabled index equals one on an index
semdup created with the same posts, every lexical model included), and a new model is a new companion behind
the same alias. The price is a second copy of the (cleaned) text, indexed by semdup.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from semdup.core.errors import SearchIndexError
from semdup.index_format.mapping import MODEL_META_KEY
from semdup.opensearch_io.boundary import OpenSearch

__all__ = [
    "SOURCE_META_KEY",
    "SourceFields",
    "companion_alias",
    "companion_index_name",
    "companion_of",
    "companion_for",
    "pinned_companion",
    "search_target",
    "source_field",
    "source_post",
]

SOURCE_META_KEY = "semdup_source"  # in the companion's _meta: {"index", "title", "body"}
_SUFFIX = ".semdup"


@dataclass(frozen=True)
class SourceFields:
    """Where a companion's posts come from: the site's index (or alias) and the fields holding title and body."""

    index: str
    title: str
    body: str

    def as_meta(self) -> dict[str, str]:
        return {"index": self.index, "title": self.title, "body": self.body}

    @classmethod
    def of_meta(cls, meta: dict[str, Any] | None) -> SourceFields | None:
        src = (meta or {}).get(SOURCE_META_KEY)
        if not isinstance(src, dict) or not {"index", "title", "body"} <= src.keys():
            return None
        return cls(str(src["index"]), str(src["title"]), str(src["body"]))


def companion_alias(index: str) -> str:
    """The alias of the companion of ``index`` (a site's index or alias): ``site-posts`` -> ``site-posts.semdup``."""
    return f"{index}{_SUFFIX}"


def companion_index_name(index: str, version: str) -> str:
    """The concrete companion for one model: a new model gets a new one behind the same alias."""
    return f"{companion_alias(index)}-{hashlib.sha1(version.encode()).hexdigest()[:10]}"


def _mappings(client: OpenSearch, name: str) -> dict[str, dict[str, Any]] | None:
    """``concrete index -> mapping`` of an index or alias; None when there is none (asked with ``ignore=404`` so a
    companion that does not exist yet is not logged as a failed request on every first ``enable``)."""
    got = client.indices.get_mapping(index=name, ignore=404)
    if got.get("status") == 404 and "error" in got:
        return None
    return {k: v.get("mappings") or {} for k, v in got.items()}


def _source_of(behind: dict[str, dict[str, Any]]) -> SourceFields | None:
    for mapping in behind.values():
        source = SourceFields.of_meta(mapping.get("_meta"))
        if source is not None:
            return source
    return None


def companion_of(client: OpenSearch, index: str) -> tuple[str, SourceFields] | None:
    """``(companion alias, its source)`` when ``index`` was connected by ``semdup enable``, else None."""
    alias = companion_alias(index)
    source = _source_of(_mappings(client, alias) or {})
    return None if source is None else (alias, source)


def pinned_companion(client: OpenSearch, index: str, version: str | None) -> tuple[str, SourceFields] | None:
    """The companion of ``index`` for model ``version``: this model's own concrete companion when it exists (and,
    while the alias holds this model, is the one behind it), else the alias.

    So workers and rerankers still running the old bundle during an upgrade keep writing and searching the old
    companion, and answer throughout; they move when restarted with the new bundle. The concrete name, not the
    alias, because a reranker keeps the name it resolved: had it kept the alias, ``semdup upgrade`` moving the
    alias would make it search the new model's vectors with the old model's query vector.
    """
    alias = companion_alias(index)
    behind = _mappings(client, alias) or {}  # one read serves both the source and the models (every sync task)
    source = _source_of(behind)
    if source is None:
        return None
    found = (alias, source)
    if version is None:
        return found
    own = companion_index_name(index, version)
    models = {(m.get("_meta") or {}).get(MODEL_META_KEY) for m in behind.values()}
    if models == {version}:
        return (own, source) if set(behind) == {own} else found
    if _mappings(client, own):
        return own, source
    return found


def companion_for(client: OpenSearch, index: str, version: str | None = None) -> tuple[str, SourceFields]:
    """The companion (for model ``version``: :func:`pinned_companion`) and source of a site's ``index``, or why
    there is none.

    Raises:
        SearchIndexError: ``index`` was not connected with ``semdup enable``.
    """
    found = pinned_companion(client, index, version)
    if found is None:
        raise SearchIndexError(
            f"index {index!r} has no semdup companion; connect it first with `semdup enable --index {index} "
            "--title-field FIELD --body-field FIELD --bundle PATH`"
        )
    return found


def search_target(client: OpenSearch, index: str, version: str | None = None) -> str:
    """The index semdup searches for ``index``: itself when semdup created it (every concrete index behind it has
    ``semdup`` fields), else its companion (for model ``version``, :func:`pinned_companion`).

    Raises:
        SearchIndexError: ``index`` does not exist, or it is a site's index that ``semdup enable`` has not connected.
    """
    own = _mappings(client, index)
    if own is None:
        raise SearchIndexError(
            f"index {index!r} does not exist; create it with `semdup index-posts --index {index} ...` "
            f"or connect an existing one with `semdup enable --index {index}`"
        )
    if own and all("semdup" in (m.get("properties") or {}) for m in own.values()):
        return index
    found = pinned_companion(client, index, version)
    if found is None:
        raise SearchIndexError(
            f"index {index!r} has no semdup fields and no companion index; connect it with "
            f"`semdup enable --index {index} --title-field FIELD --body-field FIELD --bundle PATH`, then "
            "`semdup backfill`"
        )
    return found[0]


def source_field(src: dict[str, Any], path: str) -> Any:
    """A field of a document's ``_source`` by its mapping path (``Post.Title`` inside an object, or a flat key);
    None when absent. How a site's own documents are read: their text fields, and `semdup learn`'s duplicate field."""
    if path in src:
        return src[path]
    node: Any = src
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(_as_text(v) for v in value)
    return str(value)


def source_post(doc_id: str, src: dict[str, Any], source: SourceFields) -> dict[str, str]:
    """A site document as the post semdup encodes (``{"id", "title", "body"}``, the site's raw text): the one
    reading that the workers and the freshness check share, so both hash the same text."""
    title, body = source_field(src, source.title), source_field(src, source.body)
    return {"id": str(doc_id), "title": _as_text(title), "body": _as_text(body)}
