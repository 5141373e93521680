"""A dict-backed stand-in for the OpenSearch calls of :class:`semdup.review.sessions.SessionStore`, for unit tests
of the review page (the real store runs on a real cluster in tests/integration/test_serve_keys.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from opensearchpy import exceptions as os_exc

from semdup.opensearch_io.boundary import client_error


class DictCluster:
    """The document calls :class:`SessionStore` makes, on a dict (one index)."""

    def __init__(self) -> None:
        self.docs: dict[str, dict[str, Any]] = {}
        self.gets = 0
        self.indices = SimpleNamespace(exists=lambda **_: True, get_mapping=self._mapping)

    def _mapping(self, **_: Any) -> dict[str, Any]:
        from semdup.index_format.system_indices import SESSIONS

        return {"semdup-sessions": {"mappings": {"properties": SESSIONS.properties}}}

    def index(self, index: str, id: str, body: dict[str, Any], **_: Any) -> None:
        self.docs[id] = dict(body)

    def get(self, index: str, id: str, ignore: Any = (), **_: Any) -> dict[str, Any]:
        self.gets += 1
        if id not in self.docs:
            if 404 in ignore:
                return {"_id": id, "found": False}
            raise client_error(os_exc.NotFoundError(404, "not_found", {"found": False}), "GET", f"/{index}/_doc/{id}")
        return {"_id": id, "found": True, "_source": dict(self.docs[id])}

    def update(self, index: str, id: str, body: dict[str, Any], **_: Any) -> None:
        if id in self.docs:
            self.docs[id].update(body["doc"])

    def delete(self, index: str, id: str, **_: Any) -> None:
        self.docs.pop(id, None)

    def delete_by_query(self, index: str, body: dict[str, Any], **_: Any) -> None:
        """The purge's query: ``bool`` of ``should`` / ``filter`` / ``must_not`` over ``term``, ``range`` (``lt``)
        and ``exists`` clauses, evaluated on the stored documents."""
        for doc_id, doc in list(self.docs.items()):
            if _matches(body["query"], doc):
                del self.docs[doc_id]


def _matches(query: dict[str, Any], doc: dict[str, Any]) -> bool:
    ((kind, spec),) = query.items()
    if kind == "bool":
        should = spec.get("should", [])
        return (
            all(_matches(q, doc) for q in spec.get("filter", []))
            and not any(_matches(q, doc) for q in spec.get("must_not", []))
            and (not should or any(_matches(q, doc) for q in should))
        )
    ((field, value),) = spec.items()
    if kind == "term":
        return doc.get(field) == value
    if kind == "range":
        return field in doc and doc[field] < value["lt"]
    if kind == "exists":
        return value in doc
    raise AssertionError(f"DictCluster cannot evaluate a {kind} query")
