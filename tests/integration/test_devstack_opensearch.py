"""The session's real OpenSearch: it answers, is healthy, has the modules semdup needs, and k-NN is detected right.

On the embedded node this checks what :mod:`semdup.devstack.opensearch_distribution` assembled
from Maven Central; on a Docker or remote cluster the same checks hold for the full distribution.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from semdup.core.errors import ConfigError
from semdup.devstack.local_opensearch import LocalOpenSearch, running_url
from semdup.devstack.local_process import any_free_port
from semdup.opensearch_io.clients import knn_available


@pytest.mark.opensearch
def test_cluster_answers_and_is_healthy(opensearch_client: Any) -> None:
    info = opensearch_client.info()
    assert info["version"]["distribution"] == "opensearch"
    assert opensearch_client.cluster.health(request_timeout=30)["status"] in ("green", "yellow")


@pytest.mark.opensearch
def test_knn_detection_matches_cat_plugins(
    opensearch_client: Any, embedded_opensearch: LocalOpenSearch | None
) -> None:
    listed = {row["component"] for row in opensearch_client.cat.plugins(format="json")}
    assert knn_available(opensearch_client) == ("opensearch-knn" in listed)
    if embedded_opensearch is not None:
        status = embedded_opensearch.status()
        assert status is not None
        assert status["knn"] == knn_available(opensearch_client)
        assert status["knn_engines"] == (["lucene"] if status["knn"] else [])


@pytest.mark.opensearch
def test_modules_semdup_needs_are_loaded(opensearch_client: Any) -> None:
    nodes = opensearch_client.nodes.info(metric="plugins")["nodes"]
    modules = {m["name"] for node in nodes.values() for m in node["modules"]}
    assert {"lang-painless", "lang-mustache", "mapper-extras", "analysis-common", "reindex"} <= modules


@pytest.mark.opensearch
def test_scripted_similarity_rank_features_and_search_templates_work(
    opensearch_client: Any, unique_index: str
) -> None:
    tfidf = (
        "double tf = Math.sqrt(doc.freq); double idf = Math.log((field.docCount + 1.0) / (term.docFreq + 1.0)) + 1.0;"
    )
    body = {
        "settings": {
            "similarity": {
                "tfidf": {"type": "scripted", "script": {"source": tfidf + " return query.boost * tf * idf;"}}
            },
            "analysis": {"analyzer": {"en": {"type": "english"}}},
        },
        "mappings": {
            "properties": {
                "title": {
                    "type": "text",
                    "analyzer": "en",
                    "fields": {"tfidf": {"type": "text", "similarity": "tfidf"}},
                },
                "terms": {"type": "rank_features"},
            }
        },
    }
    opensearch_client.indices.create(index=unique_index, body=body)
    docs = {"1": ("installing ubuntu packages", {"instal": 0.8, "ubuntu": 0.6}), "2": ("a laptop", {"laptop": 1.0})}
    for doc_id, (title, terms) in docs.items():
        opensearch_client.index(index=unique_index, id=doc_id, body={"title": title, "terms": terms})
    opensearch_client.indices.refresh(index=unique_index)

    hits = opensearch_client.search(index=unique_index, body={"query": {"match": {"title.tfidf": "ubuntu"}}})
    assert [h["_id"] for h in hits["hits"]["hits"]] == ["1"]
    stemmed = opensearch_client.search(index=unique_index, body={"query": {"match": {"title": "installed"}}})
    assert [h["_id"] for h in stemmed["hits"]["hits"]] == ["1"]  # the english analyzer stems both to "instal"
    sparse = {"query": {"rank_feature": {"field": "terms.ubuntu", "linear": {}, "boost": 0.5}}}
    hit = opensearch_client.search(index=unique_index, body=sparse)["hits"]["hits"][0]
    assert hit["_id"] == "1" and hit["_score"] == pytest.approx(0.3, rel=1e-3)  # 0.6 * 0.5, exact dot product
    template = {"source": {"query": {"match": {"title": "{{text}}"}}}, "params": {"text": "laptop"}}
    rendered = opensearch_client.search_template(index=unique_index, body=template)
    assert [h["_id"] for h in rendered["hits"]["hits"]] == ["2"]


@pytest.mark.opensearch
def test_lucene_knn_vector_round_trip(opensearch_client: Any, unique_index: str) -> None:
    if not knn_available(opensearch_client):
        pytest.skip("this cluster has no k-NN plugin; semdup stores vectors unindexed there")
    method = {"name": "hnsw", "engine": "lucene", "space_type": "cosinesimil"}
    body = {
        "settings": {"index": {"knn": True}},
        "mappings": {"properties": {"vector": {"type": "knn_vector", "dimension": 3, "method": method}}},
    }
    opensearch_client.indices.create(index=unique_index, body=body)
    for doc_id, vector in {"a": [1.0, 0.0, 0.0], "b": [0.0, 1.0, 0.0], "c": [0.7, 0.7, 0.0]}.items():
        opensearch_client.index(index=unique_index, id=doc_id, body={"vector": vector})
    opensearch_client.indices.refresh(index=unique_index)
    query = {"size": 3, "query": {"knn": {"vector": {"vector": [0.9, 0.1, 0.0], "k": 3}}}}
    hits = opensearch_client.search(index=unique_index, body=query)["hits"]["hits"]
    assert [h["_id"] for h in hits] == ["a", "c", "b"]
    # Lucene's cosine score is (1 + cos) / 2.
    assert hits[0]["_score"] == pytest.approx((1 + 0.9 / (0.82**0.5)) / 2, rel=1e-4)


@pytest.mark.opensearch
def test_cli_status_prints_the_url(embedded_opensearch: LocalOpenSearch | None, opensearch_url: str) -> None:
    if embedded_opensearch is None:
        pytest.skip("the session's cluster is not the embedded node (environment URL or Docker)")
    cmd = [sys.executable, "-m", "semdup", "opensearch", "status", "--data", str(embedded_opensearch.state_dir)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(opensearch_url + " health=")
    assert running_url(embedded_opensearch.state_dir) == opensearch_url


@pytest.mark.opensearch
def test_start_when_running_returns_the_same_url(embedded_opensearch: LocalOpenSearch | None) -> None:
    if embedded_opensearch is None:
        pytest.skip("the session's cluster is not the embedded node")
    assert embedded_opensearch.start(timeout=30) == embedded_opensearch.url


def test_cli_status_when_nothing_runs(tmp_path: Any) -> None:
    cmd = [sys.executable, "-m", "semdup", "opensearch", "status", "--data", str(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout.strip()) == (1, "not running")


def test_busy_port_and_bad_heap_are_refused_before_any_download(tmp_path: Any) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", any_free_port()))
        sock.listen()
        busy = sock.getsockname()[1]
        with pytest.raises(ConfigError, match=f"port {busy} on 127.0.0.1 is in use"):
            LocalOpenSearch(state_dir=tmp_path, port=busy, cache_dir=tmp_path / "empty-cache").start(timeout=5)
    with pytest.raises(ConfigError, match="heap must look like 512m or 1g"):
        LocalOpenSearch(state_dir=tmp_path, heap="lots")
