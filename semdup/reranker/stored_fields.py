"""A candidate's semdup fields as the fusion reads them: ``{"model", "vector", "terms"}`` (+ ``"title_vector"``).

They come with the candidate's hit: every source asks for the ``semdup.packed`` and ``semdup.model`` doc values
(:data:`DOCVALUE_FIELDS`), the exact float32 vectors and term weights as one binary value
(:mod:`semdup.index_format.packed_fields`; :func:`hit_fields`). Only candidates whose hits carried none (posts
written before ``semdup.packed`` existed, posts the workers have not reached) are read from their ``_source``, in one
``mget`` (:meth:`StoredFields.fetch`), through an exact cache when it is on:

Reading 100 candidates' ``_source`` (dense vectors as JSON floats) costs more than the search. With the cache,
``mget`` first asks with ``_source=false`` (about 1 ms: ids, ``_seq_no``, ``_primary_term``, ``_version``) and reads
the sources of the misses only. A document that changed has another ``(_seq_no, _primary_term, _version)``, so a
hit is always the current content. Entries are keyed by index uuid, re-read every ``UUID_TTL_S`` seconds: only
within that window after an index is deleted and re-created under the same name could an old entry be served
(restart the service after re-creating an index in place, or run with the cache off: ``SEMDUP_FIELD_CACHE=0``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from semdup.core.errors import SearchIndexError, SemdupError
from semdup.index_format.packed_fields import unpack_semdup_value
from semdup.index_format.schema import PACKED_FIELD

__all__ = ["DOCVALUE_FIELDS", "UUID_TTL_S", "FieldCache", "StoredFields", "hit_fields", "stored_semdup_fields"]

logger = logging.getLogger(__name__)

MODEL_FIELD = "semdup.model"
# what every candidate source asks each hit to carry: the packed vector + term weights, and the model version
DOCVALUE_FIELDS = (PACKED_FIELD, MODEL_FIELD)
UUID_TTL_S = 10.0

Key = tuple[str, str]  # (index uuid, document id)
Stamp = tuple[int, int, int]  # (_seq_no, _primary_term, _version)


def _unpacked(packed: str, model: Any, where: str, feature_names: Sequence[str] | None = None) -> dict[str, Any]:
    """The fields of a ``semdup.packed`` value (+ ``"title_vector"`` from a format-3 one); a bad one raises
    SemdupError."""
    try:
        value = unpack_semdup_value(packed, feature_names)
    except ValueError as exc:
        raise SemdupError(f"{where}{exc}") from exc
    out = {"model": model, "vector": value.vector, "terms": value.terms}
    if value.title is not None:
        out["title_vector"] = value.title
    return out


def hit_fields(hit: Mapping[str, Any]) -> dict[str, Any] | None:
    """A hit's fields from its doc values; None when it carries no packed value."""
    got = hit.get("fields") or {}
    packed, model = got.get(PACKED_FIELD), got.get(MODEL_FIELD)
    if not packed or not model:
        return None
    return _unpacked(packed[0], model[0], f"candidate {hit.get('_id')}: ")


def stored_semdup_fields(semdup: Mapping[str, Any], feature_names: Sequence[str] | None = None) -> dict[str, Any]:
    """A document's ``_source.semdup`` object as the fusion reads it: the packed copy when the post has one
    (exact float32 vector and weights), else the ``vector`` / ``terms`` stored beside it (older documents).

    ``{}`` (a post the workers have not reached) stays ``{}``. ``feature_names`` (``Bundle.feature_names()``)
    lets the terms of a packed value that holds vocabulary ids be read by name; the fusion does not need it.
    """
    if not semdup:
        return {}
    packed = semdup.get("packed")
    if packed:
        return _unpacked(packed, semdup.get("model"), "", feature_names)
    out = {k: v for k, v in semdup.items() if k in ("model", "vector", "terms")}
    if out.get("vector") is not None:
        # kept as the float32 array the fusion stacks (the stored values are float32s: exact)
        out["vector"] = np.asarray(out["vector"], dtype=np.float32)
    return out


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


def _doc_error(doc: Mapping[str, Any], index: str) -> None:
    if "error" in doc:
        err = doc["error"]
        if isinstance(err, dict) and err.get("type") == "index_not_found_exception":
            raise SearchIndexError(f"index {index!r} does not exist; index posts into it first")
        raise SemdupError(f"reading candidate {doc.get('_id')} of {index!r} failed: {err}")


def _source_fields(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    if not doc.get("found"):
        return None
    return stored_semdup_fields((doc.get("_source") or {}).get("semdup") or {})


class StoredFields:
    """The ``_source`` read of candidates whose hits carried no packed fields, through a :class:`FieldCache` of
    ``cache_entries`` documents (0: no cache, every read is one plain ``mget``).

    Args:
        client: an OpenSearch client (:func:`semdup.core.clients.connect`).
        cache_entries: documents kept (``RerankerSettings.field_cache``).
    """

    def __init__(self, client: Any, cache_entries: int) -> None:
        self.client = client
        self.cache = FieldCache(cache_entries) if cache_entries else None
        self._uuids: dict[str, tuple[float, dict[str, str]]] = {}
        self._lock = threading.Lock()

    def fetch(self, index: str, ids: Sequence[str], timeout: float) -> dict[str, dict[str, Any] | None]:
        """``id -> the document's semdup fields`` (:func:`stored_semdup_fields`; ``{}`` when the post has none yet,
        None when the post is gone); ``timeout``: seconds allowed for each call."""
        if not ids:
            return {}
        params = {"request_timeout": timeout}
        if self.cache is None:
            # The whole _source, unfiltered: OpenSearch copies stored bytes as they are, while source filtering
            # parses and re-serialises every float of every vector (measured: 100 Travel posts, 40 ms vs 108-130 ms).
            resp = self.client.mget(index=index, body={"ids": list(ids)}, params=params)
            out: dict[str, dict[str, Any] | None] = {}
            for doc in resp["docs"]:
                _doc_error(doc, index)
                out[str(doc["_id"])] = _source_fields(doc)
            return out
        uuids = self._index_uuids(index, timeout)
        heads = self.client.mget(index=index, body={"ids": list(ids)}, params={**params, "_source": "false"})["docs"]
        out = {}
        missing: dict[str, tuple[Key, Stamp]] = {}
        for doc in heads:
            _doc_error(doc, index)
            doc_id = str(doc["_id"])
            if not doc.get("found"):
                out[doc_id] = None
                continue
            key = (uuids.get(doc["_index"], doc["_index"]), doc_id)
            stamp = (int(doc["_seq_no"]), int(doc["_primary_term"]), int(doc["_version"]))
            fields = self.cache.get(key, stamp)
            if fields is None:
                missing[doc_id] = (key, stamp)
            else:
                out[doc_id] = fields
        if missing:
            resp = self.client.mget(index=index, body={"ids": list(missing)}, params=params)
            for doc in resp["docs"]:
                _doc_error(doc, index)
                doc_id = str(doc["_id"])
                fields = out[doc_id] = _source_fields(doc)
                key, stamp = missing[doc_id]
                if fields is not None and (doc.get("_seq_no"), doc.get("_primary_term"), doc.get("_version")) == stamp:
                    self.cache.put(key, stamp, fields)  # only what matches the version the head read saw
        return out

    def _index_uuids(self, name: str, timeout: float) -> dict[str, str]:
        """Concrete index name -> uuid for ``name`` (an index or alias), re-read every ``UUID_TTL_S`` seconds."""
        now = time.monotonic()
        cached = self._uuids.get(name)
        if cached is not None and now - cached[0] < UUID_TTL_S:
            return cached[1]
        resp = self.client.indices.get_settings(
            index=name, params={"filter_path": "*.settings.index.uuid", "request_timeout": timeout}
        )
        uuids = {k: v["settings"]["index"]["uuid"] for k, v in resp.items()}
        with self._lock:
            self._uuids[name] = (now, uuids)
        return uuids
