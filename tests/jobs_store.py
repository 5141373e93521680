"""An in-memory ``semdup-jobs`` and a broker that records, for tests of the ways in (:func:`semdup.ingest.jobs.submit`)
without a cluster: what a job records, in which order, and which task messages it publishes.

Only the calls the ledger and the job records make are answered (create, mapping, bulk, update, mget); anything else
is an AttributeError, so a test notices when the code under test starts asking for more.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from opensearchpy.serializer import JSONSerializer

from semdup.index_format.system_indices import JOBS


class _Indices:
    def __init__(self) -> None:
        self.present = False

    def exists(self, index: str, **_: Any) -> bool:
        return self.present

    def create(self, index: str, body: dict[str, Any], **_: Any) -> None:
        self.present = True

    def get_mapping(self, index: str, **_: Any) -> dict[str, Any]:
        return {index: {"mappings": JOBS.body["mappings"]}}

    def refresh(self, **_: Any) -> None:
        pass


class JobsStore:
    """``docs``: the records by ``_id`` (``job/<id>``, ``batch/<job>/<key>``), as the jobs and the ledger write."""

    def __init__(self) -> None:
        self.indices = _Indices()
        self.transport = SimpleNamespace(serializer=JSONSerializer())  # what the bulk helper serialises with
        self.docs: dict[str, dict[str, Any]] = {}

    def update(self, index: str, id: str, body: dict[str, Any], **_: Any) -> None:
        self.docs[id] = {**self.docs.get(id, {}), **body["doc"]}

    def bulk(self, body: str, **_: Any) -> dict[str, Any]:
        lines = [json.loads(line) for line in body.split("\n") if line.strip()]  # "\n" only: ids hold U+2028
        items = []
        for action, source in zip(lines[::2], lines[1::2], strict=True):
            meta = action["index"]
            self.docs[meta["_id"]] = source
            items.append({"index": {"_index": meta["_index"], "_id": meta["_id"], "status": 201}})
        return {"took": 1, "errors": False, "items": items}

    def mget(self, index: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        return {"docs": [{"_id": i, "found": i in self.docs, "_source": self.docs.get(i)} for i in body["ids"]]}

    def batches(self, job: str) -> list[dict[str, Any]]:
        """The job's ledger records, in their order."""
        found = [d for d in self.docs.values() if d.get("kind") == "batch" and d["job"] == job]
        return sorted(found, key=lambda d: d["seq"])


class RecordingBroker:
    """A Celery app's ``send_task`` that records each message; from the ``fail_at``-th (1-based) on it refuses, as
    a broker that went away does."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.messages: list[dict[str, Any]] = []
        self.fail_at = fail_at

    def send_task(self, name: str, args: list[Any], kwargs: dict[str, Any], task_id: str | None) -> None:
        if self.fail_at is not None and len(self.messages) + 1 >= self.fail_at:
            raise ConnectionRefusedError("[Errno 111] Connection refused")
        self.messages.append({"name": name, "args": args, "kwargs": kwargs, "task_id": task_id})

    @property
    def sent(self) -> list[tuple[str, list[Any]]]:
        """``(task name, args)`` of each message, in order."""
        return [(m["name"], m["args"]) for m in self.messages]
