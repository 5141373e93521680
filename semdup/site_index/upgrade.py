"""``semdup upgrade``: move a site's index connected by ``semdup enable`` to a new model without downtime.

The new model gets its own companion (``companion_index_name(index, new_version)``), created beside the old one and
kept out of the companion alias while it is filled. The copy runs in this process with the new bundle: rounds of
:func:`~semdup.ingest.reconcile.plan_sync` against the new companion and :func:`~semdup.indexer.sync.sync_batch`
of what it finds, until a round finds at most one batch left. That one loop is both the copy and the catch-up on
what the site wrote meanwhile, and it keeps no checkpoint: each round asks both indices, so running the command
again after a crash (or OpenSearch restarting) resumes where the indices stand. Workers and rerankers still on the
old bundle keep the old companion current and searched meanwhile (:func:`~semdup.index_format.companion.
pinned_companion`), and keep it after the switch, until they are restarted with the new bundle.

The switch is one ``update_aliases`` call (the old concrete companion out, the new one in as the write index),
followed by one more catch-up round. The old companion stays until :func:`remove_old` deletes it. The new
companion carries ``_meta.semdup_upgrade`` (the model it replaces) until the upgrade has finished, so a re-run
after a crash past the switch still does the last catch-up, and an unfinished upgrade to one model is never
silently abandoned for another.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from semdup.core.errors import ConfigError, OpenSearchMissing, OpenSearchUnavailable, SearchIndexError
from semdup.core.index_names import check_index_name
from semdup.core.progress import progress as progress_bar
from semdup.index_format.companion import (
    SOURCE_META_KEY,
    SourceFields,
    companion_alias,
    companion_index_name,
    companion_of,
)
from semdup.index_format.layout import IndexLayout, site_shape
from semdup.index_format.mapping import MODEL_META_KEY, common_fields
from semdup.index_format.schema import CandidateFields, index_body
from semdup.indexer.batch_writer import DocumentEncoder
from semdup.indexer.sync import sync_batch
from semdup.ingest.reconcile import plan_sync
from semdup.opensearch_io.boundary import ItemFailure, OpenSearch
from semdup.opensearch_io.bulk import chunked
from semdup.opensearch_io.clients import knn_available

__all__ = ["UPGRADE_META_KEY", "UpgradeResult", "Removed", "upgrade", "remove_old"]

logger = logging.getLogger(__name__)

UPGRADE_META_KEY = "semdup_upgrade"  # in the new companion's _meta until the upgrade finished: {"from": version}
_RESUME = "run the same command again: it resumes where the indices stand (nothing written is lost)"


class UpgradeBundle(DocumentEncoder, Protocol):
    """What :func:`upgrade` needs of a bundle: its encoder, version and vector dimension (None: no dense part)."""

    version: str
    dimension: int | None


@dataclass
class UpgradeResult:
    """What :func:`upgrade` did.

    Attributes:
        already: the alias already held the bundle's model; nothing was done.
        switched: the alias now points at ``new_index`` (False: stopped after ``max_rounds`` before switching).
        created: ``new_index`` was created by this run (False: an earlier run's, resumed).
        stale: posts still to sync when it stopped without switching.
        unencodable: posts the new model cannot encode (no text), each an ItemFailure; left out of the new companion.
    """

    index: str
    alias: str
    new_index: str
    to_version: str
    from_version: str | None = None
    old_indices: list[str] = field(default_factory=list)
    fields: CandidateFields = field(default_factory=CandidateFields)
    already: bool = False
    switched: bool = False
    created: bool = False
    rounds: int = 0
    written: int = 0
    removed: int = 0
    stale: int = 0
    unencodable: list[ItemFailure] = field(default_factory=list)


@dataclass(frozen=True)
class Removed:
    """What :func:`remove_old` deleted (or would delete with ``dry_run``), and what the alias points at."""

    alias: str
    current: list[str]
    deleted: list[str]


def upgrade(
    client: OpenSearch,
    index: str,
    bundle: UpgradeBundle,
    *,
    fields: CandidateFields | None = None,
    batch_size: int = 64,
    progress: bool = True,
    max_rounds: int = 20,
    settle: float = 0.0,
    layout: IndexLayout | None = None,
) -> UpgradeResult:
    """Fill a new companion of the site's ``index`` with ``bundle``'s model, then switch the alias to it.

    Args:
        fields: the new companion's search structures (default: those of the old one).
        max_rounds: copy/catch-up rounds before giving up the switch (the site writing faster than this process
            encodes); the result says ``switched=False`` and a re-run goes on.
        settle: seconds to wait after the switch before the last catch-up round.
        layout: the new companion's shards and replicas (the ``indices`` settings; default: the site index's).

    Raises:
        SearchIndexError: ``index`` is not connected, or an unfinished upgrade to another model is under way.
        ConfigError: ``fields`` (or the old companion's) asks for k-NN the bundle or the cluster cannot serve.
        OpenSearchUnavailable: the cluster stopped answering (the message says: run it again, it resumes).
    """
    check_index_name(index)
    try:
        return _upgrade(client, index, bundle, fields, batch_size, progress, max_rounds, settle,
                        layout or IndexLayout())  # fmt: skip
    except OpenSearchUnavailable as exc:
        raise exc.advising(f"during the upgrade of {index!r}: {_RESUME}") from exc


def _concrete(client: OpenSearch, pattern: str) -> dict[str, dict[str, Any]]:
    """``name -> mapping`` of the concrete indices matching ``pattern`` (none: empty)."""
    got = client.indices.get_mapping(index=pattern, allow_no_indices=True)
    return {k: v.get("mappings") or {} for k, v in got.items()}


def _meta(mapping: dict[str, Any]) -> dict[str, Any]:
    return dict(mapping.get("_meta") or {})


def _upgrade(
    client: OpenSearch,
    index: str,
    bundle: UpgradeBundle,
    fields: CandidateFields | None,
    batch_size: int,
    progress: bool,
    max_rounds: int,
    settle: float,
    layout: IndexLayout,
) -> UpgradeResult:
    found = companion_of(client, index)
    if found is None:
        raise SearchIndexError(
            f"index {index!r} is not connected to semdup (no companion {companion_alias(index)!r}); connect it with "
            f"`semdup enable --index {index} --title-field FIELD --body-field FIELD --bundle PATH` and backfill it"
        )
    alias, source = found
    behind = _concrete(client, alias)
    models = {_meta(m).get(MODEL_META_KEY) for m in behind.values()}
    new = companion_index_name(index, bundle.version)
    every = _concrete(client, f"{alias}-*")
    result = UpgradeResult(index, alias, new, bundle.version)

    if models == {bundle.version}:  # switched already: finish an upgrade stopped after its switch, else nothing
        pending = _meta(behind.get(new, {})).get(UPGRADE_META_KEY)
        if not pending:
            result.already = True
            return result
        result.from_version = pending.get("from")
        old = companion_index_name(index, str(result.from_version))
        result.old_indices = [old] if old in every else []
        result.fields = common_fields({new: behind[new]})
        result.switched = True
        _catch_up(client, source, bundle, result, batch_size, progress, final=True)
        _finish(client, new, behind[new])
        return result

    result.from_version = ",".join(sorted(str(m) for m in models))
    result.old_indices = sorted(behind)
    _refuse_other_upgrade(index, every, behind, models, bundle.version)
    result.fields, result.created = _new_companion(client, index, bundle, new, fields, behind, every, source,
                                                   layout)  # fmt: skip

    while True:
        left = _catch_up(client, source, bundle, result, batch_size, progress, final=False)
        if left <= batch_size:  # synced; what the site wrote during this short round: the round after the switch
            break
        if result.rounds >= max_rounds:
            result.stale = len(plan_sync(client, index, bundle.version, companion=new).ids)
            if result.stale <= batch_size:
                break
            logger.warning(
                "upgrade of %s: %d posts stale after %d rounds; not switched", index, result.stale, max_rounds
            )
            return result

    _switch(client, index, alias, new, result.old_indices, bundle.version)
    result.switched = True
    if settle > 0:
        time.sleep(settle)
    _catch_up(client, source, bundle, result, batch_size, progress, final=True)
    _finish(client, new, _concrete(client, new)[new])
    return result


def _refuse_other_upgrade(
    index: str, every: dict[str, dict[str, Any]], behind: dict[str, Any], models: set[Any], version: str
) -> None:
    """An earlier upgrade to a third model, not switched yet, must be finished or removed, never left half-filled."""
    for name, mapping in every.items():
        meta = _meta(mapping)
        pending = meta.get(UPGRADE_META_KEY)
        if name in behind or not pending or pending.get("from") not in models or meta.get(MODEL_META_KEY) == version:
            continue
        raise SearchIndexError(
            f"an upgrade of {index!r} to model {meta.get(MODEL_META_KEY)} is under way (companion {name!r}, not "
            f"switched yet), and this bundle is model {version}; finish that one with its bundle "
            f"(`semdup upgrade --alias {index} --bundle PATH`), or drop it with "
            f"`semdup upgrade --alias {index} --remove-old` first"
        )


def _new_companion(
    client: OpenSearch,
    index: str,
    bundle: UpgradeBundle,
    new: str,
    fields: CandidateFields | None,
    behind: dict[str, dict[str, Any]],
    every: dict[str, dict[str, Any]],
    source: SourceFields,
    layout: IndexLayout,
) -> tuple[CandidateFields, bool]:
    """Create the new companion out of the alias (or find an earlier run's); its search structures."""
    if new in every:
        meta = _meta(every[new])
        if meta.get(MODEL_META_KEY) == bundle.version and not meta.get(UPGRADE_META_KEY):
            raise SearchIndexError(
                f"{new!r} is the companion of model {bundle.version} kept from before an earlier upgrade (stale once "
                "the old workers were restarted); to go back to that model, remove it with "
                f"`semdup upgrade --alias {index} --remove-old`, then run again (a fresh copy)"
            )
        if meta.get(MODEL_META_KEY) != bundle.version:
            raise SearchIndexError(
                f"index {new!r} exists but holds no companion of model {bundle.version} (its _meta: {meta}); "
                f"remove it with `semdup upgrade --alias {index} --remove-old` and run again"
            )
        have = common_fields({new: every[new]})
        if fields is not None and fields != have:
            raise SearchIndexError(
                f"the new companion {new!r} of an earlier run holds {have.describe()}, not {fields.describe()}; "
                f"run again with its flags, or remove it with `semdup upgrade --alias {index} --remove-old`"
            )
        logger.info("upgrade of %s resumes filling %s", index, new)
        return have, False
    wanted = fields if fields is not None else common_fields(behind)
    plugin = wanted.knn and knn_available(client)
    if wanted.knn and (bundle.dimension is None or not plugin):
        raise ConfigError(
            f"the new companion would hold k-NN vectors (as {'asked' if fields else 'the old companion does'}), "
            f"but bundle {bundle.version} has dimension {bundle.dimension} and the cluster's k-NN plugin is "
            f"{'present' if plugin else 'missing'}; upgrade with --fields packed or --fields sparse"
        )
    shape = layout.companion(site_shape(client, index))  # the site's shards and replicas, as enable's companion
    body = index_body(shape=shape, dimension=bundle.dimension, fields=wanted)
    body["mappings"]["_meta"] = {
        MODEL_META_KEY: bundle.version,
        SOURCE_META_KEY: source.as_meta(),
        UPGRADE_META_KEY: {"from": ",".join(sorted(str(_meta(m).get(MODEL_META_KEY)) for m in behind.values()))},
    }
    client.indices.create(index=new, body=body)
    logger.info("upgrade of %s: created %s for model %s (%s; %s)", index, new, bundle.version, wanted.describe(),
                shape.describe())  # fmt: skip
    return wanted, True


def _catch_up(
    client: OpenSearch,
    source: SourceFields,
    bundle: UpgradeBundle,
    result: UpgradeResult,
    batch_size: int,
    progress: bool,
    *,
    final: bool,
) -> int:
    """One round: sync every post of the site that the new companion lacks or holds stale; how many it synced."""
    index = result.index
    plan = plan_sync(client, index, bundle.version, companion=result.new_index)
    skip = {f.id for f in result.unencodable}
    todo = [i for i in plan.stale if i not in skip] + plan.deleted
    result.rounds += 1
    what = "catch-up after switch" if final else f"round {result.rounds}"
    logger.info("upgrade of %s, %s: %d to sync, %d current", index, what, len(todo), plan.current)
    with progress_bar(total=len(todo), desc=f"upgrade {index} ({what})", unit="post", enabled=progress) as bar:
        for chunk in chunked(iter(todo), batch_size):
            done = sync_batch(client, result.new_index, source, chunk, bundle, search=result.fields)
            result.written += done.written
            result.removed += len(done.missing)
            result.unencodable.extend(f for f in done.failed if f.id not in skip)
            bar.update(len(chunk))
    client.indices.refresh(index=result.new_index)
    return len(todo)


def _switch(client: OpenSearch, index: str, alias: str, new: str, old: list[str], version: str) -> None:
    """One atomic alias change; first check the new companion is still ours (never an auto-created stand-in)."""
    meta = _meta(_concrete(client, new).get(new, {}))
    if meta.get(MODEL_META_KEY) != version:
        raise SearchIndexError(f"the new companion {new!r} was removed or replaced during the upgrade; {_RESUME}")
    actions: list[dict[str, Any]] = [{"remove": {"index": name, "alias": alias}} for name in old]
    actions.append({"add": {"index": new, "alias": alias, "is_write_index": True}})
    client.indices.update_aliases(body={"actions": actions})
    logger.info("upgrade of %s: alias %s switched from %s to %s", index, alias, ", ".join(old), new)


def _finish(client: OpenSearch, new: str, mapping: dict[str, Any]) -> None:
    """Drop the unfinished-upgrade mark (``put_mapping`` replaces ``_meta`` as a whole)."""
    meta = _meta(mapping)
    meta.pop(UPGRADE_META_KEY, None)
    client.indices.put_mapping(index=new, body={"_meta": meta})


def remove_old(client: OpenSearch, index: str, *, dry_run: bool = False) -> Removed:
    """Delete the concrete companions of ``index`` that its companion alias no longer points at (the old models'
    after ``upgrade``, or an unfinished upgrade's); the one behind the alias is never deleted.

    Raises:
        SearchIndexError: ``index`` is not connected. OpenSearchUnavailable: the cluster did not answer.
    """
    check_index_name(index)
    alias = companion_alias(index)
    try:
        behind = _concrete(client, alias)
        if not behind:
            raise SearchIndexError(f"index {index!r} has no companion alias {alias!r}; nothing to remove")
        every = _concrete(client, f"{alias}-*")
        old = sorted(n for n in every if n not in behind)
        if old and not dry_run:
            client.indices.delete(index=",".join(old))
            logger.info("removed old companions of %s: %s", index, ", ".join(old))
    except OpenSearchMissing as exc:
        raise SearchIndexError(f"index {index!r} has no companion alias {alias!r}; nothing to remove") from exc
    except OpenSearchUnavailable as exc:
        raise exc.advising(f"while removing the old companions of {index!r}") from exc
    return Removed(alias, sorted(behind), old)
