"""The ledger's records in ``semdup-jobs`` without a cluster: an older jobs index gets the ledger's fields added, and
a batch's record gives back the exact message it was sent as."""

from __future__ import annotations

from typing import Any

from semdup.index_format.system_indices import JOBS
from semdup.ingest import ledger, outcomes

_LEDGER_FIELDS = ("batch", "seq", "size", "call", "sent", "sent_at")  # added to semdup-jobs with the ledger


class OldJobsIndex:
    """A ``semdup-jobs`` created before the ledger (no batch/seq/size/call/sent fields); records put_mapping calls."""

    def __init__(self) -> None:
        self.indices = self
        self.put: list[dict[str, Any]] = []
        self.docs: dict[str, dict[str, Any]] = {}

    def exists(self, **_: Any) -> bool:
        return True

    def get_mapping(self, index: str, **_: Any) -> dict[str, Any]:
        props = {k: v for k, v in JOBS.properties.items() if k not in _LEDGER_FIELDS}
        return {index: {"mappings": {"properties": props}}}

    def put_mapping(self, index: str, body: dict[str, Any], **_: Any) -> None:
        self.put.append(body)

    def mget(self, index: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        return {"docs": [{"found": i in self.docs, "_source": self.docs.get(i)} for i in body["ids"]]}


def test_an_older_jobs_index_gets_the_ledger_fields_once_per_client() -> None:
    old = OldJobsIndex()
    outcomes.ensure_jobs_index(old)  # type: ignore[arg-type]
    outcomes.ensure_jobs_index(old)  # type: ignore[arg-type]
    assert len(old.put) == 1
    added = old.put[0]["properties"]
    assert sorted(added) == sorted(_LEDGER_FIELDS)
    assert added["call"] == {"type": "object", "enabled": False}  # the args are kept, never indexed


def test_a_batch_record_gives_back_its_message() -> None:
    old = OldJobsIndex()
    args = ["travel", [{"id": "7", "title": "Visa?", "body": "..."}], "bow-cnn-0123456789ab"]
    old.docs["batch/j1/3"] = {"job": "j1", "batch": "3", "call": {"task": "semdup.indexer.index_posts", "args": args}}
    got = ledger.read_calls(old, [("j1", "3"), ("j1", "4")])  # type: ignore[arg-type]
    assert got == [(("j1", "3"), "semdup.indexer.index_posts", args)]  # "4" is gone (job finished): nothing to send
    assert ledger.task_id("j1", "3") == "j1-3"
