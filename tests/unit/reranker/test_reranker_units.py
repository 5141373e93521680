"""Hermetic unit tests of the reranker's pure parts: fusion, candidate merge and queries, calibration, settings."""

from __future__ import annotations

import json
import logging
import sys
import threading
from pathlib import Path

import numpy as np
import orjson
import pytest
from settings_tree import service_settings

from semdup.apps.settings import load_settings
from semdup.core.errors import (
    BundleError,
    ConfigError,
    OpenSearchUnavailable,
    PostError,
    SearchIndexError,
    SearchTimeout,
    SemdupError,
)
from semdup.core.settings import OpenSearchSettings
from semdup.reranker.calibration import Calibration, calibration_path, fit_platt, load_calibration, save_calibration
from semdup.reranker.fusion import compute_components, compute_fused, sparse_dot
from semdup.reranker.reranker import ModelMismatch
from semdup.reranker.settings import RerankerSettings
from semdup.reranker.sources import MAX_SPARSE_TERMS, Hit, KnnSource, SourceQuery, knn_query, merge, sparse_query
from semdup.service.errors import error_status
from semdup.service.settings import ServiceSettings

FUSION = {"beta_bow": 1.0, "beta_dense": 0.5, "alpha": 0.25}


def test_sparse_dot_is_the_dot_product_over_shared_keys() -> None:
    assert sparse_dot({"a": 0.6, "b": 0.8}, {"b": 0.5, "c": 1.0}) == pytest.approx(0.4)
    assert sparse_dot({}, {"a": 1.0}) == 0.0


def test_components_and_fusion_by_hand() -> None:
    q_vec = np.array([1.0, 0.0], dtype=np.float32)
    stored = [
        {"model": "m", "vector": [0.6, 0.8], "terms": {"x": 1.0}},
        {"model": "m", "vector": [1.0, 0.0], "terms": {"y": 1.0}},
        {},  # not indexed yet
    ]
    comps = compute_components(q_vec, {"x": 0.5, "y": 0.5}, stored, [2.0, 4.0, 3.0])
    np.testing.assert_allclose(comps["cos_dense"][:2], [0.6, 1.0], atol=1e-7)
    np.testing.assert_allclose(comps["cos_bow"][:2], [0.5, 0.5])
    assert np.isnan(comps["cos_dense"][2]) and np.isnan(comps["cos_bow"][2])
    np.testing.assert_allclose(comps["lexnorm"], [0.0, 1.0, 0.5])
    scores, complete = compute_fused(comps, FUSION)
    np.testing.assert_allclose(scores, [0.5 + 0.3 + 0.0, 0.5 + 0.5 + 0.25, 0.125])
    assert complete.tolist() == [True, True, False]


def test_cos_bow_of_packed_and_dict_terms_is_sparse_dot() -> None:
    from semdup.index_format.packed_fields import PackedTerms, pack_semdup_fields, unpack_semdup_fields

    rng = np.random.default_rng(0)
    query = {f"t{i}": float(w) for i, w in enumerate(rng.random(30))}
    terms = []
    for _ in range(12):
        names = [f"t{i}" for i in rng.choice(60, size=int(rng.integers(0, 20)), replace=False)]
        terms.append(dict(zip(names, rng.random(len(names)).astype(np.float32).tolist(), strict=True)))
    table = [f"t{i}" for i in range(60)]
    by_id = {name: i for i, name in enumerate(table)}

    def packed(t: dict[str, float], ids: bool) -> PackedTerms:
        return unpack_semdup_fields(pack_semdup_fields([1.0], t, [by_id[k] for k in t] if ids else None), table)[1]

    # a query as Bundle.encode_query gives it (vocabulary ids + the names table), and as a plain dict
    q_ids = np.asarray([by_id[k] for k in query])
    q_packed = PackedTerms(np.asarray(list(query.values())), ids=q_ids, feature_names=table)
    stored = [{"model": "m", "terms": [t, packed(t, False), packed(t, True)][i % 3]} for i, t in enumerate(terms)]
    expected = [sparse_dot(query, t) for t in terms]
    for q in (query, q_packed):
        comps = compute_components(None, q, stored + [{}], [0.0] * (len(stored) + 1))
        np.testing.assert_allclose(comps["cos_bow"][:-1], expected, rtol=1e-12, atol=0)
        assert np.isnan(comps["cos_bow"][-1])
    bad = [{"model": "m", "terms": unpack_semdup_fields(pack_semdup_fields(None, {"x": 1.0}, [99]))[1]}]
    with pytest.raises(SemdupError, match="outside the bundle's 60 features"):
        compute_components(None, q_packed, bad, [0.0])


def test_zero_weight_components_never_make_a_candidate_incomplete() -> None:
    comps = compute_components(None, None, [{}, {}], [1.0, 2.0])
    scores, complete = compute_fused(comps, {"beta_bow": 0.0, "beta_dense": 0.0, "alpha": 1.0})
    assert complete.all()
    np.testing.assert_allclose(scores, [0.0, 1.0])


def test_merge_keeps_first_seen_order_without_duplicates() -> None:
    knn = [Hit("b", 0.9, lexical=4.0), Hit("c", 0.8, lexical=0.0)]
    found = [("bm25", [Hit("a", 9.0), Hit("b", 5.0)]), ("knn", knn)]
    merged = merge(found, primary="bm25")
    assert merged.ids == ["a", "b", "c"]
    assert merged.lexical == {"a": 9.0, "b": 5.0, "c": 0.0}  # the template's own score over the rescored one
    assert sorted(merged.sources["b"]) == ["bm25", "knn"]


def test_sparse_query_is_linear_rank_features_boosted_by_query_weights() -> None:
    terms = {f"t{i}": 1.0 / (i + 1) for i in range(MAX_SPARSE_TERMS + 10)}
    body = sparse_query(terms, SourceQuery("", 7, exclude_id="q", restrict_ids=("a",)))
    should = body["query"]["bool"]["should"]
    assert len(should) == MAX_SPARSE_TERMS and body["size"] == 7
    assert should[0] == {"rank_feature": {"field": "semdup.terms.t0", "linear": {}, "boost": 1.0}}
    assert body["query"]["bool"]["must_not"] == [{"ids": {"values": ["q"]}}]
    assert body["query"]["bool"]["filter"] == [{"ids": {"values": ["a"]}}]


def test_knn_query_filters_inside_the_search() -> None:
    body = knn_query(np.array([0.5, 0.5]), SourceQuery("", 3, exclude_id="q"))
    knn = body["query"]["knn"]["semdup.vector"]
    assert knn["k"] == 3 and knn["vector"].tolist() == [0.5, 0.5] and knn["vector"].dtype == np.float32
    assert knn["filter"] == {"bool": {"must_not": [{"ids": {"values": ["q"]}}]}}
    assert "rescore" not in body and body["size"] == 3  # no lexical field asked: the k-NN scores as they are
    assert orjson.loads(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY))["query"]["knn"]["semdup.vector"][
        "vector"] == [0.5, 0.5]  # what the client sends: float32 values as their shortest decimals


def test_knn_hits_carry_the_lexical_score_and_each_shard_gives_its_k() -> None:
    """The rescore replaces the k-NN score by the first template's (weight 0 on the original); the source keeps its
    best k by the cluster's cosine, from k per shard."""
    q = SourceQuery("visa qatar", 2, lexical_field="text", shards=2)
    body = knn_query(np.array([1.0, 0.0]), q)
    assert body["size"] == 4 and body["query"]["knn"]["semdup.vector"]["k"] == 2
    assert body["rescore"] == {"window_size": 2, "query": {
        "rescore_query": {"match": {"text": {"query": "visa qatar"}}}, "query_weight": 0.0,
        "rescore_query_weight": 1.0, "score_mode": "total"}}
    hits = [{"_id": i, "_score": lex, "fields": {"semdup": [0.0, cos, 0.0, 1.0]}}
            for i, lex, cos in (("a", 7.0, 0.2), ("b", 0.0, 0.9), ("c", 3.0, 0.5), ("d", 5.0, None))]
    hits[3]["fields"] = {}  # a post written before the packed format 2: no components, ranked last
    best = KnnSource().hits({"hits": {"hits": hits}}, "travel", q)
    assert [(h.id, h.lexical, h.components[1]) for h in best] == [("b", 0.0, 0.9), ("c", 3.0, 0.5)]


def test_platt_recovers_a_known_logistic() -> None:
    rng = np.random.default_rng(0)
    s = rng.uniform(-1, 2, 20_000)
    y = rng.random(s.size) < 1 / (1 + np.exp(-(4.0 * s - 2.0)))
    cal = fit_platt(s, y)
    assert cal.a == pytest.approx(4.0, rel=0.1) and cal.b == pytest.approx(-2.0, rel=0.1)
    p = cal.probability(np.array([-10.0, 0.5, 10.0]))
    assert p[0] < 1e-3 and p[1] == pytest.approx(0.5, abs=0.05) and p[2] > 0.999


def test_platt_refuses_one_class() -> None:
    with pytest.raises(ValueError, match="both classes"):
        fit_platt([0.1, 0.2], [True, True])


def test_calibration_file_is_keyed_by_bundle_version(tmp_path: Path) -> None:
    path = calibration_path(tmp_path / "bow-cnn.tar.gz")
    assert path.name == "bow-cnn.calibration.json"
    save_calibration(path, "v1", Calibration(a=2.0, b=-1.0, threshold=0.7))
    save_calibration(path, "v2", Calibration(a=3.0, b=-1.5))
    assert load_calibration(path, "v1").threshold == 0.7
    assert load_calibration(path, "v2").a == 3.0
    assert load_calibration(path, "v3") is None
    path.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(BundleError, match="not a calibration file"):
        load_calibration(path, "v1")


def test_settings_validate_names_and_refuse_missing_key(tmp_path: Path) -> None:
    os_settings = OpenSearchSettings(url="http://127.0.0.1:9")
    with pytest.raises(ConfigError, match="unknown template"):
        RerankerSettings(templates=("bm99",))
    with pytest.raises(ConfigError, match="SEMDUP_API_KEY"):
        ServiceSettings(bundle="b", index="i", opensearch=os_settings)
    s = service_settings(
        {
            "bundle": "b",
            "index": "i",
            "templates": "bm25,dfr",
            "sparse": "true",
            "api_key": "secret-9f3c1a7e0b5d2c8e4a6f",
            "max_body_bytes": "4096",
        },
        os_settings,
    )
    assert s.reranker.templates == ("bm25", "dfr") and s.reranker.sparse and s.max_body_bytes == 4096
    assert "secret-9f3c" not in repr(s)
    env = {"SEMDUP_BUNDLE": "b", "SEMDUP_INDEX": "i", "SEMDUP_AUTH": "off", "SEMDUP_OPENSEARCH_URL": "http://h:1"}
    assert load_settings(env=env).service_settings().auth is False
    with pytest.raises(ConfigError, match="unknown reranker setting"):
        service_settings({"bundle": "b", "index": "i", "auth": "off", "colour": 1}, os_settings)


def test_error_statuses() -> None:
    assert error_status(PostError("x")) == 422
    assert error_status(ModelMismatch("x")) == 409
    assert error_status(SearchIndexError("x")) == 404
    assert error_status(SearchTimeout("x")) == 504
    assert error_status(OpenSearchUnavailable("x")) == 503
    assert error_status(SemdupError("x")) == 500


def test_service_logs_through_the_one_scrubbing_json_formatter(monkeypatch, capsys) -> None:
    """The service's log setup is semdup's: SEMDUP_LOG_FORMAT=json gives JsonFormatter at INFO (one record per
    request), extra fields kept, secrets scrubbed; there is no second formatter or switch."""
    from semdup.apps.http import configure_service_logging
    from semdup.core.logs import JsonFormatter

    root = logging.getLogger()
    level, hooks = root.level, (sys.excepthook, threading.excepthook)
    monkeypatch.setenv("SEMDUP_LOG_FORMAT", "json")
    for h in [h for h in root.handlers if getattr(h, "_semdup_handler", False)]:
        root.removeHandler(h)  # a CLI run in-process by an earlier test leaves its handler: start as a new process
    try:
        assert configure_service_logging() == "json"
        (handler,) = [h for h in root.handlers if getattr(h, "_semdup_handler", False)]
        assert isinstance(handler.formatter, JsonFormatter) and root.level <= logging.INFO
        logging.getLogger("semdup.apps.http").info(
            "request from http://admin:Pl4nted@proxy", extra={"path": "/v1/rerank", "status": 200, "api_key": "k-1"}
        )
        (line,) = [json.loads(x) for x in capsys.readouterr().err.splitlines()]
        assert line["message"] == "request from http://***@proxy" and line["status"] == 200 and line["level"] == "INFO"
        assert "api_key" not in line
    finally:
        for h in [h for h in root.handlers if getattr(h, "_semdup_handler", False)]:
            root.removeHandler(h)
        root.setLevel(level)
        sys.excepthook, threading.excepthook = hooks
        logging.captureWarnings(False)