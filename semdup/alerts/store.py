"""The flag store: index ``semdup-duplicates``, one document per (index, post, likely duplicate).

It lives in the cluster beside the posts it is about, so a moderator tool (or ``semdup duplicates``) reads it with a
plain search, and it survives worker and broker restarts. Created on first use with a strict mapping::

    index, post_id, candidate_id   keyword
    probability                    float, calibrated P(duplicate) (null without a calibration)
    score                          float, the fused score the decision was taken on
    model                          keyword, the bundle version that scored it
    flagged_at                     date (ISO 8601, UTC)

A flag's ``_id`` is ``{index}/{post}/{candidate}`` (:func:`flag_id`; a hash when that is too long for an ``_id`` or
ambiguous), so a task delivered twice writes the same documents. Re-flagging a post writes its new flags, then
deletes its flags that are not among them (:func:`replace_flags`), so an edited post never shows both sets and
never shows none in between.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from semdup.core.errors import ConfigError
from semdup.core.index_names import check_index_name
from semdup.core.post_rules import MAX_ID_BYTES
from semdup.index_format.system_indices import FLAGS, ensure
from semdup.opensearch_io.bulk import bulk_write

__all__ = ["FLAGS_INDEX", "Flag", "flag_id", "ensure_flags_index", "replace_flags", "delete_flags", "list_flags"]

logger = logging.getLogger(__name__)

FLAGS_INDEX = FLAGS.name  # semdup-duplicates, declared in semdup.index_format.system_indices
_PAGE = 1000


@dataclass(frozen=True)
class Flag:
    """One likely duplicate: ``candidate_id`` (already in ``index``) for ``post_id``, as the model ``model`` saw it."""

    index: str
    post_id: str
    candidate_id: str
    probability: float | None
    score: float
    model: str
    flagged_at: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, src: dict[str, Any]) -> Flag:
        p = src.get("probability")
        return cls(
            index=str(src["index"]),
            post_id=str(src["post_id"]),
            candidate_id=str(src["candidate_id"]),
            probability=None if p is None else float(p),
            score=float(src["score"]),
            model=str(src.get("model") or ""),
            flagged_at=str(src.get("flagged_at") or ""),
        )


def flag_id(index: str, post_id: str, candidate_id: str) -> str:
    """``{index}/{post}/{candidate}``; a hash when that exceeds 512 bytes or an id holds ``/`` (two pairs of ids
    must never share one ``_id``)."""
    raw = f"{index}/{post_id}/{candidate_id}"
    if "/" not in post_id + candidate_id and len(raw.encode("utf-8", "surrogatepass")) <= MAX_ID_BYTES:
        return raw
    joined = "\x00".join((index, post_id, candidate_id)).encode("utf-8", "surrogatepass")
    return "h-" + hashlib.sha256(joined).hexdigest()[:40]


def ensure_flags_index(client: Any, store: str = FLAGS_INDEX) -> None:
    """Create the store with its strict mapping unless it exists (another worker may create it first)."""
    ensure(client, FLAGS, store)


def _of_posts(index: str, post_ids: Sequence[str]) -> dict[str, Any]:
    return {"bool": {"filter": [{"term": {"index": index}}, {"terms": {"post_id": list(post_ids)}}]}}


def replace_flags(
    client: Any, index: str, post_ids: Sequence[str], flags: Sequence[Flag], store: str = FLAGS_INDEX
) -> int:
    """Make ``flags`` the only flags of ``post_ids`` (each post's earlier flags not among them are deleted).

    Returns:
        how many stale flags were deleted.

    Raises:
        OpenSearchUnavailable: the cluster did not answer, or refused some flags (the caller retries; the writes
            are idempotent).
    """
    if not post_ids:
        return 0
    ensure_flags_index(client, store)
    actions = [
        {
            "_op_type": "index",
            "_index": store,
            "_id": flag_id(f.index, f.post_id, f.candidate_id),
            "_source": f.to_json(),
        }
        for f in flags
    ]
    if actions:
        report = bulk_write(client, actions)
        if report.failed:
            first = report.failed[0]
            raise first.error(
                f"could not write {len(report.failed)} flags to {store!r} ({str(first)[:200]}); "
                "check the cluster's health and disk space"
            )
    client.indices.refresh(index=store)
    keep = [a["_id"] for a in actions]
    query = _of_posts(index, post_ids)
    if keep:
        query["bool"]["must_not"] = [{"ids": {"values": keep}}]
    resp = client.delete_by_query(index=store, body={"query": query}, conflicts="proceed", refresh=True)
    return int(resp.get("deleted", 0))


def delete_flags(client: Any, index: str, post_ids: Sequence[str], store: str = FLAGS_INDEX) -> int:
    """Delete every flag of ``post_ids`` (posts deleted meanwhile); returns how many there were."""
    if not post_ids or not client.indices.exists(index=store):
        return 0
    resp = client.delete_by_query(
        index=store, body={"query": _of_posts(index, post_ids)}, conflicts="proceed", refresh=True
    )
    return int(resp.get("deleted", 0))


def list_flags(
    client: Any,
    index: str,
    post_id: str | None = None,
    min_probability: float | None = None,
    store: str = FLAGS_INDEX,
) -> list[Flag]:
    """The flags of ``index`` (of one post when ``post_id`` is given), by post, then most likely first.

    ``min_probability`` keeps flags whose calibrated probability is at least it (flags without one are left out).

    Raises:
        ConfigError: ``index`` is a pattern or endpoint, or ``min_probability`` is outside [0, 1].
        OpenSearchUnavailable: the cluster did not answer.
    """
    check_index_name(index)
    if min_probability is not None and not 0.0 <= min_probability <= 1.0:
        raise ConfigError(f"min_probability must be within [0, 1], got {min_probability}")
    filters: list[dict[str, Any]] = [{"term": {"index": index}}]
    if post_id is not None:
        filters.append({"term": {"post_id": str(post_id)}})
    if min_probability is not None:
        filters.append({"range": {"probability": {"gte": min_probability}}})
    body: dict[str, Any] = {
        "query": {"bool": {"filter": filters}},
        "sort": [{"post_id": "asc"}, {"score": "desc"}, {"candidate_id": "asc"}],
        "size": _PAGE,
    }
    out: list[Flag] = []
    if not client.indices.exists(index=store):
        return []
    while True:
        hits = client.search(index=store, body=body)["hits"]["hits"]
        out.extend(Flag.from_json(h["_source"]) for h in hits)
        if len(hits) < _PAGE:
            return out
        body["search_after"] = hits[-1]["sort"]
