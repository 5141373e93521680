"""A dict-backed stand-in for the OpenSearch calls of :class:`semdup.review.sessions.SessionStore`, for unit tests
of the review page (the real store runs on a real cluster in tests/integration/test_serve_keys.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from opensearchpy import exceptions as os_exc

from semdup.core.opensearch import client_error


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
        (older, idle) = (c["range"] for c in body["query"]["bool"]["should"])
        for doc_id, doc in list(self.docs.items()):
            if doc["created"] < older["created"]["lt"] or doc["seen"] < idle["seen"]["lt"]:
                del self.docs[doc_id]
