"""``semdup enable``: connect an index that the site created (and keeps writing to) to semdup, through a companion.

The site's index is only read: its mapping, documents, ``_source`` and ``_meta`` stay exactly as they were, so its
own searches, partial updates and full reindexing go on as before. semdup's fields live in a companion index
(:mod:`semdup.index_format.companion`, which says why), created here behind the alias ``<index>.semdup``; the
workers fill it from the site's documents (``semdup backfill``, then ``semdup watch`` or the HTTP ingest keep it
current).

Checked and refused with a clear error, before anything is created: a missing index, an index without
``_source`` (semdup reads the posts' text from it), title or body fields that are not in the mapping of every
index behind the alias, an index semdup created itself (it needs no companion), a companion holding another
model (``semdup upgrade`` moves to a new one), and ``--knn`` asked of an existing companion created without it.
Enabling again with more flags adds the missing search structures; the next backfill fills them.

Shards and replicas (:mod:`semdup.index_format.layout`): a new companion follows the site index's (or the
``indices.companion_*`` settings); enabling again applies ``indices.companion_replicas`` when it is set (shards
cannot change in place). ``enable`` also creates semdup's stores that do not exist yet, with the store settings.
On a cluster of two or more data nodes, a companion or store that keeps no replica is reported
(:attr:`Enabled.warnings`) with the exact command that gives it one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from semdup.core.errors import OpenSearchRefused, SearchIndexError
from semdup.core.index_names import check_index_name
from semdup.index_format.companion import (
    SOURCE_META_KEY,
    SourceFields,
    companion_alias,
    companion_index_name,
    companion_of,
)
from semdup.index_format.layout import IndexLayout, site_shape, unreplicated
from semdup.index_format.mapping import MODEL_META_KEY, mappings, semdup_props
from semdup.index_format.schema import CandidateFields, index_body, missing_semdup_fields
from semdup.index_format.system_indices import SYSTEM_INDICES, ensure
from semdup.opensearch_io.boundary import OpenSearch
from semdup.search_templates import ensure_templates

__all__ = ["Enabled", "enable_index", "check_site_index", "replica_warnings"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Enabled:
    """What ``enable_index`` did: the companion alias and concrete index, whether it was created, and the
    search structures it holds (what the workers write)."""

    companion: str
    index: str
    created: bool
    fields: CandidateFields
    source: SourceFields
    warnings: tuple[str, ...] = ()


def _field_exists(properties: dict[str, Any], path: str) -> bool:
    node: dict[str, Any] | None = {"properties": properties}
    for part in path.split("."):
        if node is None or part not in (node.get("properties") or {}):
            return False
        node = node["properties"][part]
    return True


def check_site_index(client: OpenSearch, index: str, title_field: str, body_field: str) -> None:
    """Refuse a site index semdup cannot read its posts from (every concrete index behind an alias is checked).

    Raises:
        SearchIndexError: missing, no ``_source``, a text field missing from a mapping, or an index semdup created.
    """
    found = mappings(client, index)
    for name, mapping in found.items():
        props = mapping.get("properties") or {}
        if (mapping.get("_source") or {}).get("enabled") is False:
            raise SearchIndexError(
                f"index {name!r} does not keep _source, so semdup cannot read the posts' text from it; "
                "reindex it with _source enabled"
            )
        for wanted in (title_field, body_field):
            if not _field_exists(props, wanted):
                raise SearchIndexError(
                    f"index {name!r} has no field {wanted!r}; name its title and body fields with "
                    f"--title-field/--body-field (fields there: {', '.join(sorted(props)) or 'none'})"
                )
    if found and all("packed" in (semdup_props(m) or {}) for m in found.values()):
        raise SearchIndexError(
            f"index {index!r} was created by semdup and holds its fields already; it needs no companion "
            f"(fill it with `semdup backfill --index {index}`)"
        )


def enable_index(
    client: OpenSearch,
    index: str,
    *,
    version: str,
    dimension: int | None,
    title_field: str = "title",
    body_field: str = "body",
    fields: CandidateFields | None = None,
    layout: IndexLayout | None = None,
) -> Enabled:
    """Create (or complete) the companion of the site's ``index`` for bundle ``version``.

    Args:
        fields: the search structures for the reranker's hybrid candidate paths (default: none).
        layout: shards and replicas (the ``indices`` settings; default: follow the site index).

    Raises:
        SearchIndexError: see the module doc. OpenSearchUnavailable: the cluster did not answer.
    """
    check_index_name(index)
    wanted = fields or CandidateFields()
    check_site_index(client, index, title_field, body_field)
    source = SourceFields(index, title_field, body_field)
    ensure_templates(client)  # the reranker's candidate searches of the companion need them
    layout = layout or IndexLayout()
    existing = companion_of(client, index)
    if existing is None:
        out = _create(client, index, version, dimension, wanted, source, layout)
    else:
        out = _complete(client, existing[0], version, dimension, wanted, source, layout)
    for decl in SYSTEM_INDICES:  # the stores the service and workers write, with the store settings
        ensure(client, decl)
    warnings = replica_warnings(client, [out.companion], [d.name for d in SYSTEM_INDICES])
    for line in warnings:
        logger.warning("%s", line)
    return replace(out, warnings=tuple(warnings))


def replica_warnings(client: OpenSearch, companions: list[str], stores: list[str]) -> list[str]:
    """One line per index of ``companions`` (aliases or concrete) and ``stores`` that keeps no replica on a
    cluster of two or more data nodes, each with the command that gives it one (none on a single node)."""
    store_set = set(stores)
    out = []
    for name in unreplicated(client, [*companions, *stores]):
        fix = (
            f"curl -X PUT \"$SEMDUP_OPENSEARCH_URL/{name}/_settings\" -H 'Content-Type: application/json' "
            """-d '{"index":{"number_of_replicas":1}}'"""
        )
        also = "" if name in store_set else " (or set SEMDUP_COMPANION_REPLICAS=1 and run `semdup enable` again)"
        what = "store" if name in store_set else "companion"
        out.append(
            f"the {what} {name} has 0 replicas on a cluster of several data nodes: losing the node that holds a "
            f"shard loses it; give it a replica: {fix}{also}"
        )
    return out


def _create(
    client: OpenSearch,
    index: str,
    version: str,
    dimension: int | None,
    wanted: CandidateFields,
    source: SourceFields,
    layout: IndexLayout,
) -> Enabled:
    alias, concrete = companion_alias(index), companion_index_name(index, version)
    shape = layout.companion(site_shape(client, index))
    body = index_body(shape=shape, dimension=dimension, fields=wanted)
    body["mappings"]["_meta"] = {MODEL_META_KEY: version, SOURCE_META_KEY: source.as_meta()}
    body["aliases"] = {alias: {"is_write_index": True}}
    try:
        client.indices.create(index=concrete, body=body)
    except OpenSearchRefused as exc:
        if exc.type != "resource_already_exists_exception":
            raise
        # a concurrent enable, or an earlier one stopped before the alias: put the alias, then complete it
        client.indices.put_alias(index=concrete, name=alias)
        return _complete(client, alias, version, dimension, wanted, source, layout)
    logger.info("enabled semdup on %s: companion %s (model %s, %s; %s)", index, concrete, version, wanted.describe(),
                shape.describe())  # fmt: skip
    return Enabled(alias, concrete, True, wanted, source)


def _complete(
    client: OpenSearch,
    alias: str,
    version: str,
    dimension: int | None,
    wanted: CandidateFields,
    source: SourceFields,
    layout: IndexLayout,
) -> Enabled:
    found = mappings(client, alias)
    if layout.companion_replicas is not None:  # replicas change in place; shards stay what the index was made with
        replicas = layout.companion(None).replica_settings()
        client.indices.put_settings(index=alias, body={"index": replicas})
        logger.info("companion %s: replicas set to %s", alias, layout.companion_replicas)
    settings = client.indices.get_settings(index=alias)
    targets = []
    for name, mapping in found.items():
        meta = mapping.get("_meta") or {}
        current = meta.get(MODEL_META_KEY)
        if current not in (None, version):
            raise SearchIndexError(
                f"the companion {name!r} of {source.index!r} holds vectors of model {current}, not {version}; move "
                f"to a new model with `semdup upgrade --alias {source.index} --bundle PATH`"
            )
        knn_on = str(settings.get(name, {}).get("settings", {}).get("index", {}).get("knn", "false")).lower()
        mapped = ((mapping.get("properties") or {}).get("semdup") or {}).get("properties") or {}
        target = wanted | CandidateFields.of_mapping(mapped)
        targets.append(target)
        if target.knn and "vector" not in mapped and knn_on != "true":
            raise SearchIndexError(
                f"the companion {name!r} was created without k-NN, which cannot be turned on later; create a new "
                f"one with `semdup upgrade --alias {source.index} --bundle PATH --knn`, or drop --knn"
            )
        missing = missing_semdup_fields(mapped, dimension, target)
        new_meta = {**meta, MODEL_META_KEY: version, SOURCE_META_KEY: source.as_meta()}
        client.indices.put_mapping(
            index=name,
            body={"_meta": new_meta, "properties": {"semdup": {"properties": missing}}},
        )
        if missing:
            logger.info("companion %s gained semdup.%s; a backfill fills them", name, ", ".join(missing))
    concrete = next(iter(found))
    return Enabled(alias, concrete, False, CandidateFields.common(targets), source)
