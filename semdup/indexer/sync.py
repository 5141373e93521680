"""Sync: posts of a site's index -> its companion (:mod:`semdup.index_format.companion`), the work of the
``sync_posts`` task without Celery.

Given ids, it reads the posts as the site stores them *now* (a realtime ``mget`` on each concrete index behind the
site's alias: a search would miss a post written less than a refresh ago, and ``mget`` through an alias over several
indices is refused), encodes and writes them to the companion with the hash of the text encoded, and removes from
the companion the ids the site no longer has. So one task serves a new post, an edit and a delete alike, and a task
delivered twice writes the same thing.

A post edited or deleted while it is being encoded: after writing, the ids are read again; a post whose text
changed meanwhile is encoded again (up to ``rounds`` times), one deleted meanwhile is removed. Whatever a race
leaves after that, the next ``semdup watch`` / backfill finds by its content hash.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from semdup.index_format.companion import SourceFields, source_post
from semdup.index_format.documents import content_hash
from semdup.index_format.mapping import mappings
from semdup.index_format.schema import CandidateFields
from semdup.indexer.batch_writer import BatchResult, DocumentEncoder, delete_batch, index_batch
from semdup.opensearch_io.boundary import OpenSearch, mget_docs

__all__ = ["read_source_posts", "site_indices", "sync_batch"]

logger = logging.getLogger(__name__)


def site_indices(client: OpenSearch, source: SourceFields) -> list[str]:
    """The concrete indices behind the site's index or alias (raises SearchIndexError when it is gone)."""
    return sorted(mappings(client, source.index))


def read_source_posts(
    client: OpenSearch, source: SourceFields, ids: Sequence[str], concrete: Sequence[str] | None = None
) -> dict[str, dict[str, str]]:
    """``id -> {"id", "title", "body"}`` of the given ids that the site's index (or any index behind its alias)
    holds now; an id that is absent is not in the answer. ``concrete``: :func:`site_indices`, when the caller
    reads several times in a row."""
    if not ids:
        return {}
    concrete = concrete if concrete is not None else site_indices(client, source)
    docs = [{"_index": name, "_id": str(i)} for name in concrete for i in ids]
    resp = client.mget(body={"docs": docs}, _source_includes=[source.title, source.body])
    out: dict[str, dict[str, str]] = {}
    for doc in mget_docs(resp, f"GET /_mget ({source.index})"):
        if doc.get("found") and str(doc["_id"]) not in out:
            out[str(doc["_id"])] = source_post(str(doc["_id"]), doc.get("_source") or {}, source)
    return out


def _hashes(posts: dict[str, dict[str, str]]) -> dict[str, str]:
    return {i: content_hash(p["title"], p["body"]) for i, p in posts.items()}


def sync_batch(
    client: OpenSearch,
    companion: str,
    source: SourceFields,
    ids: Sequence[str],
    bundle: DocumentEncoder,
    *,
    search: CandidateFields | None = None,
    rounds: int = 3,
) -> BatchResult:
    """Make the companion hold exactly the site's current version of each id (see the module doc).

    ``result.written`` counts posts written, ``result.missing`` ids removed because the site has them no more,
    ``result.failed`` posts that cannot be encoded (no text, binary): their stale companion document is removed
    too, so an edit that emptied a post never leaves its old vector searchable.
    """
    result = BatchResult()
    todo = [str(i) for i in dict.fromkeys(ids)]
    concrete = site_indices(client, source)  # once: every read below goes to the same indices
    for round_no in range(max(rounds, 1)):
        current = read_source_posts(client, source, todo, concrete)
        gone = [i for i in todo if i not in current]
        if gone:
            delete_batch(client, companion, gone)
            result.missing.extend(i for i in gone if i not in result.missing)
        if not current:
            break
        part = index_batch(client, companion, list(current.values()), bundle, search=search)
        result.written += part.written
        failed = {f.id for f in part.failed}
        result.failed.extend(part.failed)
        result.payloads.update(part.payloads)
        if failed:
            delete_batch(client, companion, sorted(failed))
        written = {i: h for i, h in _hashes(current).items() if i not in failed}
        again = read_source_posts(client, source, list(written), concrete)
        changed = [i for i, h in _hashes(again).items() if written[i] != h]
        deleted = [i for i in written if i not in again]
        if deleted:
            delete_batch(client, companion, deleted)
            result.missing.extend(deleted)
            result.written -= len(deleted)
        if not changed:
            break
        logger.info("%d posts of %s changed while being encoded; encoding them again", len(changed), source.index)
        result.written -= len(changed)
        todo = changed
        if round_no == rounds - 1:
            logger.warning(
                "%d posts of %s kept changing while being encoded; `semdup watch` or the next backfill picks them up",
                len(changed),
                source.index,
            )
    return result
