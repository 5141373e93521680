"""Duplicate flagging without a cluster: which candidates become flags, their ids, the store's requests, settings.

The reranker and the store are fakes at their seams; the real ones run in tests/integration/test_alerts_celery.py.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from semdup.alerts import flag as flag_mod
from semdup.alerts import store
from semdup.alerts.settings import AlertSettings
from semdup.apps.settings import load_settings
from semdup.core.errors import ConfigError, PostError
from semdup.core.posts import Post
from semdup.indexer import sync as sync_mod
from semdup.reranker.calibration import Calibration
from semdup.reranker.reranker import Candidate, Reranker
from semdup.reranker.settings import RerankerSettings


# --- flag ids -------------------------------------------------------------------------------------------------
def test_flag_ids_are_readable_deterministic_and_never_shared() -> None:
    assert store.flag_id("travel", "123", "87") == "travel/123/87" == store.flag_id("travel", "123", "87")
    long = store.flag_id("travel", "x" * 600, "87")
    assert long.startswith("h-") and len(long.encode()) <= 512 and long == store.flag_id("travel", "x" * 600, "87")
    # an id holding the separator is hashed, so ("b/c", "d") and ("b", "c/d") never meet on one _id
    assert store.flag_id("a", "b/c", "d") != store.flag_id("a", "b", "c/d")
    assert store.flag_id("a", "1", "2") != store.flag_id("a", "2", "1") != store.flag_id("b", "1", "2")


# --- flag_duplicates ------------------------------------------------------------------------------------------
class FakeReranker:
    """Ranks from a table ``post id -> candidates``; records what it was asked."""

    version = "m-1"

    def __init__(self, table: dict[str, list[Candidate]], threshold: float | None = 0.5) -> None:
        self.table, self.threshold, self.calls = table, threshold, []

    def rank(self, post: Post, k: int, exclude_id: str | None, index: str) -> list[Candidate]:
        self.calls.append((post.id, k, exclude_id, index))
        if not post.title and not post.body:
            raise PostError("post has neither title nor body")
        return [c for c in self.table.get(post.id, []) if c.id != exclude_id][:k]


def _cand(cid: str, score: float, p: float | None = None, complete: bool = True) -> Candidate:
    return Candidate(id=cid, score=score, components={}, probability=p, complete=complete)


@pytest.fixture
def recorded(monkeypatch) -> dict[str, Any]:
    """The store's writes, and which posts the index still holds (``present``)."""
    seen: dict[str, Any] = {"replaced": [], "deleted": [], "present": None}

    def present_ids(client, index, ids):
        return set(ids) if seen["present"] is None else set(ids) & seen["present"]

    monkeypatch.setattr(flag_mod, "present_ids", present_ids)
    monkeypatch.setattr(
        flag_mod, "replace_flags", lambda c, i, ids, flags, s: seen["replaced"].append((list(ids), list(flags)))
    )
    monkeypatch.setattr(flag_mod, "delete_flags", lambda c, i, ids, s: seen["deleted"].append(list(ids)))
    return seen


def test_only_complete_candidates_at_or_past_the_threshold_are_flagged(recorded) -> None:
    rr = FakeReranker(
        {
            "9": [
                _cand("3", 0.9, 0.91),
                _cand("4", 0.5, 0.5),  # exactly at the threshold: flagged
                _cand("5", 0.95, 0.97, complete=False),  # not indexed yet: no decision
                _cand("6", 0.49, 0.4),
            ]
        }
    )
    flags = flag_mod.flag_duplicates(rr, object(), "travel", [Post("9", "Visa for Qatar?")], k=10)
    assert [(f.post_id, f.candidate_id, f.probability, f.score, f.model) for f in flags] == [
        ("9", "3", 0.91, 0.9, "m-1"),
        ("9", "4", 0.5, 0.5, "m-1"),
    ]
    assert rr.calls == [("9", 10, "9", "travel")]  # ranked against the index, itself excluded
    assert recorded["replaced"] == [(["9"], flags)] and recorded["deleted"] == []
    assert flags[0].flagged_at.endswith("+00:00")


def test_a_post_deleted_meanwhile_gets_no_flags_and_loses_its_old_ones(recorded) -> None:
    recorded["present"] = {"1"}
    rr = FakeReranker({"1": [_cand("7", 0.8)], "2": [_cand("7", 0.8)]})
    flags = flag_mod.flag_duplicates(rr, object(), "travel", [Post("1", "a"), Post("2", "b")])
    assert [f.post_id for f in flags] == ["1"]
    assert recorded["deleted"] == [["2"]] and recorded["replaced"] == [(["1"], flags)]


def test_a_post_with_nothing_past_the_threshold_or_unusable_text_has_its_old_flags_replaced_by_none(recorded) -> None:
    rr = FakeReranker({"1": [_cand("7", 0.1)]})
    assert flag_mod.flag_duplicates(rr, object(), "travel", [Post("1", "a"), Post("2", "", "")]) == []
    assert recorded["replaced"] == [(["1", "2"], [])]  # edited to below the threshold / to nothing: cleared


def test_without_any_threshold_flagging_refuses_before_any_call(recorded) -> None:
    rr = FakeReranker({"1": [_cand("7", 0.9)]}, threshold=None)
    with pytest.raises(ConfigError, match="no duplicate threshold and no calibration"):
        flag_mod.flag_duplicates(rr, object(), "travel", [Post("1", "a")])
    assert rr.calls == [] and recorded["replaced"] == []
    with pytest.raises(ConfigError, match="k must be at least 1"):
        flag_mod.flag_duplicates(FakeReranker({}), object(), "travel", [Post("1", "a")], k=0)
    with pytest.raises(ConfigError, match="must not start with '_'"):
        flag_mod.flag_duplicates(FakeReranker({}), object(), "_all", [Post("1", "a")])


def test_the_threshold_is_the_calibrations_else_the_bundles() -> None:
    bundle = SimpleNamespace(
        version="m-1",
        threshold=0.4,
        fusion={"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.0},
        term_weights=None,
        dimension=8,
    )
    cal = Calibration(a=5.0, b=-3.0, threshold=0.7)
    assert flag_mod.decision_threshold(Reranker(bundle, object(), "t", RerankerSettings(), cal)) == 0.7
    assert flag_mod.decision_threshold(Reranker(bundle, object(), "t", RerankerSettings())) == 0.4
    bundle.threshold = None
    with pytest.raises(ConfigError, match="semdup eval decisions --fit"):
        flag_mod.decision_threshold(Reranker(bundle, object(), "t", RerankerSettings(), Calibration(a=1.0, b=0.0)))


def test_read_posts_reads_the_index_text_and_names_the_missing(monkeypatch) -> None:
    class Client:
        def mget(self, body, **kw):
            assert kw == {"_source_includes": ["title", "body"]}
            assert body == {"docs": [{"_index": "travel", "_id": "1"}, {"_index": "travel", "_id": "2"}]}
            return {
                "docs": [
                    {"_id": "1", "found": True, "_source": {"title": "t", "body": ["a", "b"]}},
                    {"_id": "2", "found": False},
                ]
            }

    monkeypatch.setattr(flag_mod, "companion_of", lambda client, index: None)  # an index semdup created
    monkeypatch.setattr(sync_mod, "mappings", lambda client, index: {"travel": {}})
    posts, missing = flag_mod.read_posts(Client(), "travel", ["1", "2"])
    assert posts == [Post("1", "t", "a b")] and missing == ["2"]


# --- the store's requests -------------------------------------------------------------------------------------
class StoreClient:
    """Records the store's requests; ``pages`` are the search answers, in turn."""

    def __init__(self, exists: bool = True, pages: list[list[dict[str, Any]]] | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.pages = list(pages or [])
        self.indices = SimpleNamespace(
            exists=lambda **kw: exists,
            create=lambda **kw: self.calls.append(("create", kw)),
            refresh=lambda **kw: self.calls.append(("refresh", kw)),
        )

    def delete_by_query(self, **kw: Any) -> dict[str, Any]:
        self.calls.append(("delete_by_query", kw))
        return {"deleted": 2}

    def search(self, **kw: Any) -> dict[str, Any]:
        self.calls.append(("search", {**kw, "body": {**kw["body"]}}))
        return {"hits": {"hits": self.pages.pop(0)}}


def test_replace_writes_deterministic_ids_then_deletes_only_the_posts_other_flags(monkeypatch) -> None:
    written: list[dict[str, Any]] = []
    monkeypatch.setattr(
        store, "bulk_write", lambda client, actions: written.extend(actions) or SimpleNamespace(failed=[])
    )
    client = StoreClient(exists=False)
    flag = store.Flag("travel", "9", "3", 0.91, 0.9, "m-1", "2025-01-01T00:00:00+00:00")
    assert store.replace_flags(client, "travel", ["9"], [flag]) == 2
    assert client.calls[0][0] == "create" and client.calls[0][1]["body"]["mappings"]["dynamic"] == "strict"
    assert [(a["_id"], a["_index"]) for a in written] == [("travel/9/3", "semdup-duplicates")]
    query = next(kw for name, kw in client.calls if name == "delete_by_query")["body"]["query"]["bool"]
    assert query["filter"] == [{"term": {"index": "travel"}}, {"terms": {"post_id": ["9"]}}]
    assert query["must_not"] == [{"ids": {"values": ["travel/9/3"]}}]


def test_list_flags_filters_pages_and_refuses_a_bad_probability() -> None:
    src = {
        "index": "travel",
        "post_id": "9",
        "candidate_id": "3",
        "probability": 0.91,
        "score": 0.9,
        "model": "m",
        "flagged_at": "t",
    }
    page1 = [{"_source": {**src, "candidate_id": str(i)}, "sort": ["9", 0.9, str(i)]} for i in range(store._PAGE)]
    client = StoreClient(pages=[page1, [{"_source": src, "sort": ["9", 0.9, "3"]}]])
    flags = store.list_flags(client, "travel", post_id="9", min_probability=0.8)
    assert len(flags) == store._PAGE + 1 and flags[-1] == store.Flag.from_json(src)
    first, second = (kw["body"] for name, kw in client.calls if name == "search")
    assert first["query"]["bool"]["filter"] == [
        {"term": {"index": "travel"}},
        {"term": {"post_id": "9"}},
        {"range": {"probability": {"gte": 0.8}}},
    ]
    assert "search_after" not in first and second["search_after"] == ["9", 0.9, str(store._PAGE - 1)]
    assert store.list_flags(StoreClient(exists=False), "travel") == []
    with pytest.raises(ConfigError, match="within \\[0, 1\\]"):
        store.list_flags(client, "travel", min_probability=1.5)


# --- settings -------------------------------------------------------------------------------------------------
def _flagging(env: dict[str, str]) -> bool:
    return load_settings(env=env).alerts.flag_duplicates


def test_the_switch_is_off_unless_set_and_refuses_a_non_boolean() -> None:
    assert _flagging({}) is False and _flagging({"SEMDUP_FLAG_DUPLICATES": ""}) is False
    assert _flagging({"SEMDUP_FLAG_DUPLICATES": "1"}) is True
    assert _flagging({"SEMDUP_FLAG_DUPLICATES": "off"}) is False
    with pytest.raises(ConfigError, match="SEMDUP_FLAG_DUPLICATES must be true or false"):
        _flagging({"SEMDUP_FLAG_DUPLICATES": "maybe"})


def test_alert_settings_read_the_services_candidate_variables() -> None:
    default = load_settings(env={}).alert_settings()
    assert default.flag_k is None and default.reranker  # None: the calibration's k, else 10
    assert default.reranker == RerankerSettings() and default.calibration is None
    env = {"SEMDUP_FLAG_K": "3", "SEMDUP_KNN": "1", "SEMDUP_TEMPLATES": "bm25,lmj", "SEMDUP_CALIBRATION": "/c.json"}
    tree = load_settings(env=env)
    s = tree.alert_settings()
    assert (s.flag_k, s.reranker.knn, s.reranker.templates, s.calibration) == (3, True, ("bm25", "lmj"), "/c.json")
    assert s.reranker == tree.candidates  # the service's candidate paths, one section
    with pytest.raises(ConfigError, match="SEMDUP_FLAG_K must be within"):
        load_settings(env={"SEMDUP_FLAG_K": "0"})
    with pytest.raises(ConfigError, match="SEMDUP_FLAG_K must be a whole number, got 'ten'"):
        load_settings(env={"SEMDUP_FLAG_K": "ten"})
    with pytest.raises(ConfigError, match="SEMDUP_FLAG_K must be within"):
        AlertSettings(flag_k=101)
