"""A bounded, exact cache of candidates' stored semdup fields, keyed by index uuid, id and document version.

Reading 100 candidates' ``_source`` (dense vectors as JSON floats) is most of a rerank call's extra cost over a
plain BM25 search. The reranker first asks ``mget`` with ``_source=false`` (about 1 ms: ids, ``_seq_no``,
``_primary_term``, ``_version``) and reads the sources of the misses only. A document that changed has another
``(_seq_no, _primary_term, _version)``, so a hit is always the current content. An index deleted and re-created
under the same name gets a new uuid; the reranker re-reads index uuids every ``UUID_TTL_S`` seconds, so only
within that window after such a re-creation could an old entry be served (restart the service after
re-creating an index in place, or run with the cache off: ``SEMDUP_FIELD_CACHE=0``).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

__all__ = ["FieldCache", "UUID_TTL_S"]

logger = logging.getLogger(__name__)

UUID_TTL_S = 10.0

Key = tuple[str, str]  # (index uuid, document id)
Stamp = tuple[int, int, int]  # (_seq_no, _primary_term, _version)


class FieldCache:
    """LRU of ``(index uuid, id) -> (stamp, semdup fields)``, at most ``max_entries`` entries; thread-safe.

    Args:
        max_entries: bound on cached documents (a 400-dimension document is about 10 kB in Python objects).
    """

    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.max_entries = max_entries
        self._data: OrderedDict[Key, tuple[Stamp, dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Key, stamp: Stamp) -> dict[str, Any] | None:
        """The cached fields when the stored stamp is ``stamp``; None on a miss or an older version."""
        with self._lock:
            entry = self._data.get(key)
            if entry is None or entry[0] != stamp:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return entry[1]

    def put(self, key: Key, stamp: Stamp, fields: dict[str, Any]) -> None:
        with self._lock:
            self._data[key] = (stamp, fields)
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)
