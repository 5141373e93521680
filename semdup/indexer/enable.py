"""``semdup enable``: give semdup's fields to an index that semdup did not create, without rebuilding it.

Chosen strategy: **in place** (``put_mapping``). The index's mapping gains the ``semdup`` object (``model``
keyword, ``packed`` binary doc values holding the vector and term weights the reranker reads; with ``--sparse``
``terms`` rank_features, with ``--knn`` ``vector`` knn_vector: :class:`~semdup.index_format.schema.CandidateFields`)
and its ``_meta`` gains ``semdup_model`` (the bundle version, the model-mixing guard) and ``semdup_text_fields``
(which of its fields hold the title and the body). A backfill then fills ``semdup`` with scripted partial updates
that touch only ``semdup``.

Why in place rather than a companion index (``NAME-semdup`` keyed by the same ids): the reranker reads
the candidates' vectors from the very hits the search templates return, so one index means one request
and no join; adding a field never changes the scores of queries on the other fields, and
``put_mapping`` is allowed on any index whose mapping does not already use the name ``semdup``.
Its limits, checked here and refused with a clear error: the index must keep ``_source`` (partial updates
rebuild the document from it), and ``--knn`` needs an index created with ``index.knn: true`` (that setting cannot
be turned on for an existing index; reindex into one that has it). With ``--knn`` the vector stays in ``_source``
as on indices semdup creates (``_source.excludes`` cannot be added to an existing mapping, and semdup does not
use it anywhere: it cost more indexing CPU than it saved, see ``schema.py``). Enabling again with more flags adds
the structures that are missing. The companion index is left as a documented alternative, not built.

Nothing of the original documents is changed or lost: their fields and ``_id`` stay as they are, and the
mapping of the existing fields is not touched (``put_mapping`` adds, it cannot change).
"""

from __future__ import annotations

import logging
from typing import Any

from opensearchpy import OpenSearch
from opensearchpy import exceptions as os_exc

from semdup.core.errors import IndexError_, OpenSearchUnavailable
from semdup.index_format.mapping import MODEL_META_KEY, TEXT_FIELDS_META_KEY
from semdup.index_format.schema import CandidateFields, missing_semdup_fields

__all__ = ["enable_index"]

logger = logging.getLogger(__name__)

_TIMEOUT = 30.0


def _field_exists(properties: dict[str, Any], path: str) -> bool:
    node: dict[str, Any] | None = {"properties": properties}
    for part in path.split("."):
        if node is None or part not in (node.get("properties") or {}):
            return False
        node = node["properties"][part]
    return True


def enable_index(
    client: OpenSearch,
    index: str,
    *,
    version: str,
    dimension: int | None,
    title_field: str = "title",
    body_field: str = "body",
    fields: CandidateFields | None = None,
) -> dict[str, Any]:
    """Add the ``semdup`` fields and ``_meta`` to ``index`` (each concrete index behind an alias).

    Args:
        fields: the search structures to add for the reranker's hybrid candidate paths (default: none).

    Returns:
        ``{"indices": [...], "fields": CandidateFields}``: which indices were changed, and the search structures
        every one of them now holds (what the workers will write).

    Raises:
        IndexError_: missing index, no ``_source``, text fields not in the mapping, a ``semdup`` field of
            another shape, vectors of another model already there, or ``knn`` asked of an index without
            ``index.knn``.
        OpenSearchUnavailable: the cluster did not answer.
    """
    try:
        mappings = client.indices.get_mapping(index=index, request_timeout=_TIMEOUT)
        settings = client.indices.get_settings(index=index, request_timeout=_TIMEOUT)
    except os_exc.NotFoundError as exc:
        raise IndexError_(f"index {index!r} does not exist; check the name with `GET _cat/indices`") from exc
    except (os_exc.ConnectionError, os_exc.ConnectionTimeout) as exc:
        raise OpenSearchUnavailable(f"OpenSearch did not answer while reading {index!r}: {exc}") from exc

    wanted_fields = fields or CandidateFields()
    plans = []
    for name, m in mappings.items():
        mapping = m.get("mappings") or {}
        meta = mapping.get("_meta") or {}
        props = mapping.get("properties") or {}
        if (mapping.get("_source") or {}).get("enabled") is False:
            raise IndexError_(
                f"index {name!r} does not keep _source, so semdup cannot read the posts' text nor update them in "
                "place; reindex it with _source enabled"
            )
        for wanted in (title_field, body_field):
            if not _field_exists(props, wanted):
                raise IndexError_(
                    f"index {name!r} has no field {wanted!r}; name its title and body fields with "
                    f"--title-field/--body-field (fields there: {', '.join(sorted(props)) or 'none'})"
                )
        current = meta.get(MODEL_META_KEY)
        if current not in (None, version):
            raise IndexError_(
                f"index {name!r} already holds vectors of model {current}, not {version}; use a new index for a "
                "new model and switch an alias"
            )
        index_knn = settings.get(name, {}).get("settings", {}).get("index", {}).get("knn", "false")
        if wanted_fields.knn and str(index_knn).lower() != "true":
            raise IndexError_(
                f"index {name!r} was created without index.knn: true, so it cannot hold a knn_vector (the setting "
                "cannot be turned on later); drop --knn, or reindex into an index created with index.knn: true"
            )
        new_meta = {**meta, MODEL_META_KEY: version, TEXT_FIELDS_META_KEY: {"title": title_field, "body": body_field}}
        # Enabling again (after an upgrade that added a field, or with more flags) adds only what is missing.
        mapped = (props.get("semdup") or {}).get("properties") or {}
        target = wanted_fields | CandidateFields.of_mapping(mapped)
        missing = missing_semdup_fields(mapped, dimension, target)
        body = {"_meta": new_meta, "properties": {"semdup": {"properties": missing}}}
        plans.append((name, body, target))

    for name, body, target in plans:
        try:
            client.indices.put_mapping(index=name, body=body, request_timeout=_TIMEOUT)
        except os_exc.RequestError as exc:
            raise IndexError_(
                f"index {name!r} refused semdup's fields ({exc.info if exc.info else exc}); if it already has a "
                "field named 'semdup' of another shape, semdup cannot be enabled in place there"
            ) from exc
        except (os_exc.ConnectionError, os_exc.ConnectionTimeout) as exc:
            raise OpenSearchUnavailable(f"OpenSearch did not answer while updating {name!r}: {exc}") from exc
        logger.info("enabled semdup on %s (model %s, %s)", name, version, target.describe())
    return {"indices": [p[0] for p in plans], "fields": CandidateFields.common(p[2] for p in plans)}
