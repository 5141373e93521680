"""semdup's own indices in the cluster, one declaration each, created through one function.

    ensure(client, PARKED)                    # created with its settings and strict mapping unless it exists
    ensure(client, FLAGS, name="test-flags")  # the same declaration under another name (tests, a second site)

A declaration (:class:`SystemIndex`) is the index's name, its settings and its mapping's fields; :func:`ensure`
creates it unless it exists (workers and service processes race to create it first: the loser's
``resource_already_exists_exception`` is fine), and adds to an index an older semdup created the fields declared
since (a mapping only grows), once per client and name in a process. Every call uses the client's timeout
(``SEMDUP_OPENSEARCH_TIMEOUT``, set where the client is built, :func:`semdup.opensearch_io.clients.connect`).

The stores: ``semdup-parked`` (posts that could not be written, :mod:`semdup.ingest.parking`), ``semdup-jobs``
(index jobs, their tasks' outcomes and the ledger of their batches, :mod:`semdup.ingest.outcomes`,
:mod:`semdup.ingest.ledger`), ``semdup-duplicates`` (duplicate flags, :mod:`semdup.alerts.store`) and
``semdup-verdicts`` (moderators' verdicts, :mod:`semdup.review.verdicts`), ``semdup-sessions`` (the review page's
logins, :mod:`semdup.review.sessions`) and ``semdup-locks`` (one document per ``semdup pipeline`` name while a
``create`` or ``remove`` of it runs, :mod:`semdup.search_pipeline.setup`).

Their shards and replicas are the process's store layout (:func:`use_store_shape`, which the composition roots
call with the ``indices.store_*`` settings: the CLI, the worker app, the HTTP app), by default one shard and
``auto_expand_replicas: 0-1`` (:mod:`semdup.index_format.layout`): one replica wherever the cluster has a second
data node, so a node's loss loses no verdict, flag or ledger entry, and none on a single node (never yellow).
A store is created by whichever process writes to it first, deep below any settings argument, hence one shape per
process rather than a parameter through every writer.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from semdup.core.errors import OpenSearchRefused
from semdup.index_format.layout import Shape

__all__ = [
    "SystemIndex",
    "PARKED",
    "JOBS",
    "FLAGS",
    "VERDICTS",
    "SESSIONS",
    "LOCKS",
    "SYSTEM_INDICES",
    "ensure",
    "use_store_shape",
    "store_shape",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SystemIndex:
    """One of semdup's stores: its name and fields (the mapping is ``dynamic: strict``); its shards and replicas
    are the process's store shape (module doc)."""

    name: str
    properties: dict[str, Any]

    def body_for(self, shape: Shape) -> dict[str, Any]:
        """The ``PUT /<name>`` body with ``shape``'s shards and replicas."""
        return {"settings": {"index": shape.settings()},
                "mappings": {"dynamic": "strict", "properties": self.properties}}  # fmt: skip

    @property
    def body(self) -> dict[str, Any]:
        """The ``PUT /<name>`` body with the process's store shape."""
        return self.body_for(store_shape())


PARKED = SystemIndex(
    "semdup-parked",
    {
        "index": {"type": "keyword"},
        "post_id": {"type": "keyword", "ignore_above": 4096},  # kept whole in _source; searchable if shorter
        "task": {"type": "keyword"},
        "error": {"type": "text"},
        "model_version": {"type": "keyword"},
        "payload": {"type": "object", "enabled": False},
        "parked_at": {"type": "date", "format": "epoch_second"},
    },
)

JOBS = SystemIndex(
    "semdup-jobs",
    {
        "kind": {"type": "keyword"},  # "job", "outcome" or "batch"
        "job": {"type": "keyword"},
        "index": {"type": "keyword"},
        "model_version": {"type": "keyword"},
        "task": {"type": "keyword"},
        "total": {"type": "integer"},
        "written": {"type": "integer"},
        "parked": {"type": "integer"},
        "skipped": {"type": "integer"},
        "at": {"type": "date", "format": "epoch_second"},
        # the ledger (semdup.ingest.ledger): a batch's key, order and size, its message (stored, not indexed:
        # it is only read back to send the batch again), and on the job record the batches published so far
        "batch": {"type": "keyword"},
        "seq": {"type": "integer"},
        "size": {"type": "integer"},
        "call": {"type": "object", "enabled": False},
        "sent": {"type": "integer"},
        "sent_at": {"type": "date", "format": "epoch_second"},
    },
)

FLAGS = SystemIndex(
    "semdup-duplicates",
    {
        "index": {"type": "keyword"},
        "post_id": {"type": "keyword", "ignore_above": 4096},
        "candidate_id": {"type": "keyword", "ignore_above": 4096},
        "probability": {"type": "float"},
        "score": {"type": "float"},
        "model": {"type": "keyword"},
        "flagged_at": {"type": "date"},
    },
)

VERDICTS = SystemIndex(
    "semdup-verdicts",
    {
        "pair": {"type": "keyword"},
        "index": {"type": "keyword"},
        "post_id": {"type": "keyword", "ignore_above": 4096},
        "candidate_id": {"type": "keyword", "ignore_above": 4096},
        "verdict": {"type": "keyword"},
        "who": {"type": "keyword"},
        "when": {"type": "date"},
        "model": {"type": "keyword"},
        "score": {"type": "float"},
        "probability": {"type": "float"},
    },
)

# A review login: the document's _id is the SHA-256 of the session id (the cookie), so reading the index gives no
# session away; ``kid`` names the key (an HMAC of it, semdup.review.sessions.key_id), never the key itself; ``owner``
# the service that made it (an HMAC under its session secret, semdup.review.sessions.owner_id), which alone reads,
# ends and purges it, by the lifetimes stored with it (``idle``, ``max_age``; ``expires`` is when they end it).
SESSIONS = SystemIndex(
    "semdup-sessions",
    {
        "kid": {"type": "keyword"},
        "who": {"type": "keyword"},
        "csrf": {"type": "keyword", "index": False},
        "owner": {"type": "keyword"},
        "created": {"type": "date", "format": "epoch_second"},
        "seen": {"type": "date", "format": "epoch_second"},
        "idle": {"type": "integer", "index": False},
        "max_age": {"type": "integer", "index": False},
        "expires": {"type": "date", "format": "epoch_second"},
    },
)

# A lock: the document's _id is what is locked (a pipeline's name); made with op_type=create, so one process holds
# it; ``taken`` lets a later one take over a lock whose holder was killed.
LOCKS = SystemIndex(
    "semdup-locks",
    {
        "what": {"type": "keyword"},
        "owner": {"type": "keyword"},
        "taken": {"type": "date", "format": "epoch_second"},
    },
)

SYSTEM_INDICES = (PARKED, JOBS, FLAGS, VERDICTS, SESSIONS, LOCKS)

_current: set[tuple[int, str]] = set()  # (client id, index name) known to hold the declared mapping
_lock = threading.Lock()
_shape = Shape()  # the stores' shards and replicas in this process (use_store_shape)


def use_store_shape(shape: Shape) -> None:
    """The shards and replicas the stores this process creates get (``IndexLayout.store()`` of the settings);
    called once by a composition root. Stores that exist keep theirs."""
    global _shape
    _shape = shape


def store_shape() -> Shape:
    """The stores' shape in this process (:func:`use_store_shape`; default one shard, ``auto_expand_replicas 0-1``)."""
    return _shape


def ensure(client: Any, decl: SystemIndex, name: str | None = None) -> bool:
    """Make sure ``decl`` exists as ``name`` (default: its own name) with every declared field; True when this call
    created it.

    Raises:
        OpenSearchUnavailable: the cluster did not answer.
    """
    name = name or decl.name
    key = (id(client), name)
    if key in _current:
        return False
    created = _create(client, decl, name)
    if not created:
        _add_fields(client, decl, name)
    with _lock:
        _current.add(key)
    if created:
        logger.info("created %s", name)
    return created


def _create(client: Any, decl: SystemIndex, name: str) -> bool:
    try:
        if client.indices.exists(index=name):
            return False
        client.indices.create(index=name, body=decl.body_for(store_shape()))
        return True
    except OpenSearchRefused as exc:
        if exc.type != "resource_already_exists_exception":
            raise
        return False


def _add_fields(client: Any, decl: SystemIndex, name: str) -> None:
    """Add the fields declared since an older semdup created ``name`` (e.g. the ledger's, on ``semdup-jobs``)."""
    found = client.indices.get_mapping(index=name)
    props = next(iter(found.values()), {}).get("mappings", {}).get("properties", {})
    missing = {k: v for k, v in decl.properties.items() if k not in props}
    if missing:
        client.indices.put_mapping(index=name, body={"properties": missing})
        logger.info("added the fields %s to %s", ", ".join(sorted(missing)), name)
