"""``pipeline_lock``: one ``create`` or ``remove`` of a pipeline name at a time (the real race, two ``semdup pipeline
create`` processes on a node with ml-commons, is tests/integration/test_search_pipeline_ops.py). Here the lock's
rules on a dict standing in for the ``semdup-locks`` document calls: a second holder waits for the first, a lock
left by a killed process is taken over, a holder whose lock was taken over does not delete the new one."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from opensearchpy import exceptions as os_exc

from semdup.core.errors import OpenSearchUnavailable
from semdup.opensearch_io.boundary import client_error
from semdup.search_pipeline import setup
from semdup.search_pipeline.setup import pipeline_lock


class LockDocs:
    """``index`` (``op_type=create`` or conditioned on ``if_seq_no``), ``get`` and ``delete`` of one index's
    documents, with OpenSearch's 409 on a conflict."""

    def __init__(self) -> None:
        self.docs: dict[str, tuple[int, dict[str, Any]]] = {}
        self.seq = 0
        self.lock = threading.Lock()

    def _conflict(self, method: str, doc_id: str) -> Exception:
        return client_error(os_exc.ConflictError(409, "version_conflict_engine_exception", {}), method, doc_id)

    def index(self, index: str, id: str, body: dict[str, Any], op_type: str | None = None,
              if_seq_no: int | None = None, **_: Any) -> dict[str, Any]:  # fmt: skip
        with self.lock:
            held = self.docs.get(id)
            if (op_type == "create" and held) or (if_seq_no is not None and (not held or held[0] != if_seq_no)):
                raise self._conflict("PUT", id)
            self.seq += 1
            self.docs[id] = (self.seq, dict(body))
            return {"_seq_no": self.seq, "_primary_term": 1}

    def get(self, index: str, id: str, **_: Any) -> dict[str, Any]:
        with self.lock:
            held = self.docs.get(id)
            if held is None:
                return {"found": False}
            return {"found": True, "_seq_no": held[0], "_primary_term": 1, "_source": dict(held[1])}

    def delete(self, index: str, id: str, if_seq_no: int | None = None, **_: Any) -> None:
        with self.lock:
            held = self.docs.get(id)
            if held is None or (if_seq_no is not None and held[0] != if_seq_no):
                raise self._conflict("DELETE", id)
            del self.docs[id]


@pytest.fixture
def docs(monkeypatch: pytest.MonkeyPatch) -> LockDocs:
    monkeypatch.setattr(setup, "ensure", lambda client, decl: False)  # the index exists
    return LockDocs()


def test_a_second_holder_waits_for_the_first(docs: LockDocs) -> None:
    order: list[str] = []
    first_in = threading.Event()

    def first() -> None:
        with pipeline_lock(docs, "semdup-travel"):
            first_in.set()
            time.sleep(0.6)
            order.append("first done")

    t = threading.Thread(target=first)
    t.start()
    first_in.wait(5)
    with pipeline_lock(docs, "semdup-travel"):
        order.append("second in")
    t.join()
    assert order == ["first done", "second in"] and docs.docs == {}  # released both times


def test_another_name_does_not_wait_and_a_long_holder_times_the_waiter_out(docs: LockDocs) -> None:
    with pipeline_lock(docs, "semdup-a"):
        with pipeline_lock(docs, "semdup-b", wait=1):  # another pipeline: no wait
            pass
        with pytest.raises(OpenSearchUnavailable, match="held its lock"):
            with pipeline_lock(docs, "semdup-a", wait=0.5):
                pass


def test_a_lock_left_by_a_killed_process_is_taken_over(docs: LockDocs, caplog: pytest.LogCaptureFixture) -> None:
    docs.index("semdup-locks", "semdup-travel", {"owner": "killed", "taken": int(time.time()) - 3600})
    with pipeline_lock(docs, "semdup-travel", wait=2):
        assert docs.get("semdup-locks", "semdup-travel")["_source"]["owner"] != "killed"
    assert docs.docs == {} and "took over the lock" in caplog.text


def test_a_holder_whose_lock_was_taken_over_leaves_the_new_one(docs: LockDocs) -> None:
    with pipeline_lock(docs, "semdup-travel"):
        docs.docs["semdup-travel"] = (999, {"owner": "someone else", "taken": int(time.time())})  # taken over
    assert docs.docs["semdup-travel"][1]["owner"] == "someone else"
