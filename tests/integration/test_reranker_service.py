"""The HTTP service on a real OpenSearch: API key, JSON errors for every kind of bad call, and it stays up.

In-process through FastAPI's TestClient, and once as a real ``semdup serve`` (uvicorn) subprocess whose answers
must equal the in-process Reranker's scores.
"""

# ruff: noqa: F811  (the module-scoped fixtures are imported from test_reranker_parity)
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from settings_tree import service_settings
from stub_servers import garbage_cluster, wait_until_answering

from semdup.apps.http import create_app
from semdup.bundle.bundle import Bundle
from semdup.core.errors import ConfigError
from semdup.core.posts import Post
from semdup.core.settings import OpenSearchSettings
from semdup.devstack.local_process import any_free_port
from semdup.index_format.mapping import MODEL_META_KEY
from semdup.ingest.lexical_index import create_index
from semdup.opensearch_io.clients import connect
from semdup.reranker import Reranker, RerankerSettings
from semdup.service.settings import ServiceSettings

KEY = "test-key-7f3a-7d2f0c9e4b1a"
OPS_KEY = "ops-key-61d0-3e9b2a7c5f84"
HEADERS = {"X-API-Key": KEY}


def settings_for(bundle_dir: Path, index: str, url: str, **changes: Any) -> ServiceSettings:
    values = {
        "bundle": str(bundle_dir),
        "index": index,
        "api_key": KEY,
        "max_body_bytes": 64 * 1024,
        "max_text_chars": 20_000,
        **changes,
    }
    return service_settings(values, OpenSearchSettings(url=url))


@pytest.fixture(scope="module")
def app_client(served: tuple[Bundle, str], tiny_bundle: Path, opensearch_url: str) -> TestClient:
    bundle, index = served
    return TestClient(create_app(settings_for(tiny_bundle, index, opensearch_url, api_keys=f"{OPS_KEY}:*:ops")))


def good_call(client: TestClient, post: Post) -> dict[str, Any]:
    r = client.post(
        "/v1/rerank", json={"title": post.title, "body": post.body, "k": 5, "exclude_id": post.id}, headers=HEADERS
    )
    assert r.status_code == 200, r.text
    return r.json()


def test_rerank_answers_ranked_candidates(
    app_client: TestClient,
    served: tuple[Bundle, str],
    real_posts: list[Post],
) -> None:
    bundle, _ = served
    out = good_call(app_client, real_posts[4])
    assert out["model"] == bundle.version
    cands = out["candidates"]
    assert 1 <= len(cands) <= 5 and all(c["id"] != real_posts[4].id for c in cands)
    assert [c["score"] for c in cands] == sorted((c["score"] for c in cands), reverse=True)
    assert set(cands[0]["components"]) == {"cos_bow", "cos_dense", "lexical", "lexnorm"}
    assert cands[0]["is_duplicate"] in (True, False)  # the tiny bundle's threshold is 0.5


def test_api_key_is_enforced(app_client: TestClient, real_posts: list[Post]) -> None:
    body = {"title": real_posts[0].title, "body": ""}
    for headers in ({}, {"X-API-Key": "wrong"}, {"X-API-Key": ""}):
        r = app_client.post("/v1/rerank", json=body, headers=headers)
        assert r.status_code == 401 and r.json()["error"]["type"] == "Unauthorized"
    assert app_client.post("/v1/rerank", json=body, headers=HEADERS).status_code == 200


def test_service_refuses_to_start_without_a_key(tiny_bundle: Path, opensearch_url: str) -> None:
    with pytest.raises(ConfigError, match="SEMDUP_API_KEY"):
        settings_for(tiny_bundle, "x", opensearch_url, api_key=None)
    open_settings = settings_for(tiny_bundle, "x", opensearch_url, api_key=None, auth="off")
    assert open_settings.auth is False


@pytest.mark.parametrize(
    ("payload", "status", "kind"),
    [
        ({"title": "", "body": ""}, 422, "ValidationError"),
        ({}, 422, "ValidationError"),
        ({"title": "\x00\x01\x02\x03\x04\x05\x06\x07" * 8, "body": ""}, 422, "ValidationError"),
        ({"title": "<p> </p>", "body": "&nbsp;"}, 422, "PostError"),  # markup only: no schema can say it
        ({"title": "word " * 5000, "body": ""}, 422, "ValidationError"),  # 25,000 chars > max_text_chars
        ({"title": "x" * 70_000}, 413, "BodyTooLarge"),
        ({"title": "ok", "k": 0}, 422, "ValidationError"),
        ({"title": "ok", "k": 5000}, 422, "ValidationError"),
        ({"title": "ok", "k": "5"}, 422, "ValidationError"),
        ({"title": 42}, 422, "ValidationError"),
        ({"title": "ok", "titel": "typo"}, 422, "ValidationError"),
        ({"title": "ok", "templates": ["nope"]}, 422, "ValidationError"),
        ({"title": "ok", "templates": ["bm25"] * 600}, 422, "ValidationError"),  # was a 504 "within None s"
        ({"title": "ok", "index": "semdup-no-such-index"}, 404, "SearchIndexError"),
    ],
)
def test_bad_calls_get_json_errors_and_the_service_stays_up(
    app_client: TestClient,
    real_posts: list[Post],
    payload: dict,
    status: int,
    kind: str,
) -> None:
    r = app_client.post("/v1/rerank", json=payload, headers=HEADERS)
    assert r.status_code == status, r.text
    assert r.json()["error"]["type"] == kind and r.json()["error"]["message"]
    if status == 422:  # FastAPI's shape too, as the schema documents
        assert r.json()["detail"] and {"loc", "msg", "type"} <= set(r.json()["detail"][0])
    assert app_client.get("/healthz").status_code == 200
    good_call(app_client, real_posts[5])


def test_malformed_and_non_utf8_bodies_get_422(app_client: TestClient, real_posts: list[Post]) -> None:
    for raw in (b'{"title": "unterminated', b'{"title": "\xff\xfe caf\xe9"}', b"\x00\x01binary", b"[1, 2]"):
        r = app_client.post("/v1/rerank", content=raw, headers={**HEADERS, "content-type": "application/json"})
        assert r.status_code == 422 and r.json()["error"]["type"] == "ValidationError", (raw, r.text)
    good_call(app_client, real_posts[6])


def test_chunked_bodies_over_the_limit_get_413_like_plain_ones(app_client: TestClient, real_posts: list[Post]) -> None:
    def chunks(n: int) -> Iterator[bytes]:  # no Content-Length: sent with Transfer-Encoding: chunked
        yield b'{"title": "'
        for _ in range(n):
            yield b"word " * 200
        yield b'"}'

    r = app_client.post("/v1/rerank", content=chunks(100), headers={**HEADERS, "content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["type"] == "BodyTooLarge", r.text
    small = app_client.post("/v1/rerank", content=chunks(2), headers={**HEADERS, "content-type": "application/json"})
    assert small.status_code == 200, small.text
    good_call(app_client, real_posts[8])


def test_openapi_declares_the_key_the_bounds_and_every_answer(app_client: TestClient) -> None:
    schema = app_client.app.openapi()
    assert schema["components"]["securitySchemes"]["APIKeyHeader"] == {
        "type": "apiKey",
        "in": "header",
        "name": "X-API-Key",
        "description": schema["components"]["securitySchemes"]["APIKeyHeader"]["description"],
    }
    op = schema["paths"]["/v1/rerank"]["post"]
    # the key in X-API-Key, or as a bearer token (what an ml-commons connector sends, semdup pipeline)
    assert op["security"] == [{"APIKeyHeader": []}, {"HTTPBearer": []}]
    assert set(op["responses"]) == {"200", "401", "403", "404", "409", "413", "422", "429", "500", "503", "504"}
    body = schema["components"]["schemas"][op["requestBody"]["content"]["application/json"]["schema"]["$ref"][21:]]
    assert body["properties"]["k"]["maximum"] == 100 and body["properties"]["title"]["maxLength"] == 20_000
    assert body["additionalProperties"] is False
    assert "text/plain" in schema["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    r = app_client.request("TRACE", "/healthz")
    assert r.status_code == 405 and r.headers["allow"] == "GET"


def test_index_of_another_model_gets_409(
    opensearch_client: Any, unique_index: str, served: tuple[Bundle, str], tiny_bundle: Path, opensearch_url: str
) -> None:
    bundle, index = served
    create_index(opensearch_client, unique_index, dimension=bundle.dimension)
    opensearch_client.indices.put_mapping(index=unique_index, body={"_meta": {MODEL_META_KEY: "cnn-222222222222"}})
    app = TestClient(create_app(settings_for(tiny_bundle, index, opensearch_url, indices=[index, unique_index])))
    r = app.post("/v1/rerank", json={"title": "mount a usb drive", "index": unique_index}, headers=HEADERS)
    assert r.status_code == 409 and "cnn-222222222222" in r.json()["error"]["message"]


def test_opensearch_down_gets_503_and_readyz_says_not_ready(
    served: tuple[Bundle, str],
    tiny_bundle: Path,
    real_posts: list[Post],
) -> None:
    bundle, index = served
    dead = f"http://127.0.0.1:{any_free_port()}"  # nothing listens there
    client = connect(OpenSearchSettings(url=dead, max_retries=0, timeout=2), check=False)
    rr = Reranker(bundle, client, index, RerankerSettings(search_timeout=2))
    app = TestClient(create_app(settings_for(tiny_bundle, index, dead), reranker=rr))
    r = app.post("/v1/rerank", json={"title": real_posts[0].title}, headers=HEADERS)
    assert r.status_code == 503 and r.json()["error"]["type"] == "OpenSearchUnavailable"
    assert app.get("/readyz").status_code == 503
    assert app.get("/healthz").json()["status"] == "ok"


def test_opensearch_timeout_gets_504(
    served: tuple[Bundle, str],
    tiny_bundle: Path,
    opensearch_url: str,
    real_posts: list[Post],
) -> None:
    bundle, index = served
    client = connect(OpenSearchSettings(url=opensearch_url, max_retries=0), check=False)
    rr = Reranker(bundle, client, index, RerankerSettings(search_timeout=0.5))
    rr.target()  # the index is resolved on the real cluster; then the cluster hangs
    with _stalled_server() as stalled:  # accepts the connection and never answers, as a cluster stuck in GC
        rr.client = connect(OpenSearchSettings(url=stalled, max_retries=0), check=False)
        app = TestClient(create_app(settings_for(tiny_bundle, index, opensearch_url), reranker=rr))
        r = app.post("/v1/rerank", json={"title": real_posts[0].title}, headers=HEADERS)
    assert r.status_code == 504 and r.json()["error"]["type"] == "SearchTimeout"


@contextlib.contextmanager
def _stalled_server() -> Iterator[str]:
    """A loopback TCP server that accepts connections and never answers (a search that cannot finish in time,
    whatever the machine's load: a 1 µs timeout against the real cluster sometimes won the race)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()


def test_probes_metrics_and_openapi(app_client: TestClient, real_posts: list[Post]) -> None:
    assert app_client.get("/readyz").json()["ready"] is True
    good_call(app_client, real_posts[7])
    assert app_client.get("/metrics").status_code == 401  # it names every served index: the ops scope only
    assert app_client.get("/metrics", headers={"X-API-Key": KEY}).status_code == 403
    text = app_client.get("/metrics", headers={"X-API-Key": OPS_KEY}).text
    assert 'semdup_rerank_requests_total{path="/v1/rerank",status="200"}' in text
    assert "semdup_rerank_request_seconds_bucket" in text
    schema = app_client.get("/openapi.json", headers={"Authorization": f"Bearer {OPS_KEY}"}).json()
    assert "/v1/rerank" in schema["paths"] and schema == app_client.app.openapi()
    assert app_client.get("/openapi.json").status_code == 401
    assert app_client.get("/docs").status_code == 404 and app_client.get("/redoc").status_code == 404


def test_readyz_on_a_connected_site_reports_the_companion_and_its_model(
    opensearch_client: Any, unique_index: str, served: tuple[Bundle, str], tiny_bundle: Path, opensearch_url: str
) -> None:
    """A site's own index connected with `semdup enable` is served through its companion: /readyz reports the
    companion's model (the site's own index has none), and refuses a companion of another model as rerank does."""
    from benchmarks.site_index import make_site_index
    from semdup.site_index.enable import enable_index

    bundle, index = served
    site, other = unique_index, f"{unique_index}-other"
    served_posts = [Post(f"{n}", f"Visa question {n}", "<p>Do I need a visa for Qatar?</p>") for n in range(5)]
    try:
        for name, version in ((site, bundle.version), (other, "bow-cnn-000000000000")):
            make_site_index(opensearch_client, name, served_posts)
            dimension = bundle.dimension
            enable_index(
                opensearch_client, name, version=version, dimension=dimension, title_field="Title", body_field="Body"
            )
        ready = TestClient(create_app(settings_for(tiny_bundle, site, opensearch_url))).get("/readyz")
        assert ready.status_code == 200, ready.text
        checks = ready.json()["checks"]
        assert checks["companion"].startswith(f"{site}.semdup"), checks
        assert checks["index"] == {checks["companion"]: bundle.version}, checks  # not {site: None}
        wrong = TestClient(create_app(settings_for(tiny_bundle, other, opensearch_url))).get("/readyz")
        assert wrong.status_code == 503 and "bow-cnn-000000000000" in wrong.json()["reason"], wrong.text
        own = TestClient(create_app(settings_for(tiny_bundle, index, opensearch_url))).get("/readyz").json()
        assert own["ready"] and "companion" not in own["checks"] and own["checks"]["index"] == {index: bundle.version}
    finally:
        opensearch_client.indices.delete(index=f"{site}*", ignore_unavailable=True, request_timeout=30)


@pytest.mark.slow
def test_real_uvicorn_service_equals_the_offline_reranker(
    served: tuple[Bundle, str],
    tiny_bundle: Path,
    opensearch_url: str,
    opensearch_client: Any,
    real_posts: list[Post],
    tmp_path: Path,
) -> None:
    bundle, index = served
    port = any_free_port()
    env = {**os.environ, "SEMDUP_API_KEY": KEY, "SEMDUP_OPENSEARCH_URL": opensearch_url}
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "semdup",
            "serve",
            "--bundle",
            str(tiny_bundle),
            "--index",
            index,
            "--port",
            str(port),
            "--workers",
            "2",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_answering(proc, base, tmp_path / "serve.log", path="/readyz")
        rr = Reranker(bundle, opensearch_client, index)
        for post in real_posts[:5]:
            r = httpx.post(
                f"{base}/v1/rerank",
                headers=HEADERS,
                timeout=30,
                json={"title": post.title, "body": post.body, "k": 10, "exclude_id": post.id},
            )
            assert r.status_code == 200, r.text
            offline = rr.rank(post, k=10, exclude_id=post.id)
            got = r.json()["candidates"]
            assert [c["id"] for c in got] == [c.id for c in offline]
            assert max(abs(a["score"] - b.score) for a, b in zip(got, offline, strict=True)) <= 1e-9
        bad = httpx.post(f"{base}/v1/rerank", headers=HEADERS, json={"title": ""}, timeout=30)
        assert bad.status_code == 422
        assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_cli_rerank_prints_the_reranker_answer(
    served: tuple[Bundle, str], tiny_bundle: Path, opensearch_url: str, opensearch_client: Any, real_posts: list[Post]
) -> None:
    import json

    bundle, index = served
    post = real_posts[9]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "semdup",
            "rerank",
            "--bundle",
            str(tiny_bundle),
            "--index",
            index,
            "--title",
            post.title,
            "--body",
            post.body,
            "--exclude-id",
            post.id,
            "--k",
            "4",
            "--json",
            "--opensearch",
            opensearch_url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)["candidates"]
    want = Reranker(bundle, opensearch_client, index).rank(post, k=4, exclude_id=post.id)
    assert [c["id"] for c in got] == [c.id for c in want]


def test_cli_serve_refuses_to_start_without_a_key(tiny_bundle: Path, opensearch_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("SEMDUP_API_KEY", "SEMDUP_AUTH")}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "semdup",
            "serve",
            "--bundle",
            str(tiny_bundle),
            "--index",
            "x",
            "--opensearch",
            opensearch_url,
            "--port",
            str(any_free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert out.returncode == 1 and "SEMDUP_API_KEY" in out.stderr


@pytest.mark.slow
def test_json_mode_service_logs_are_json_lines_without_secrets(tiny_bundle: Path, tmp_path: Path) -> None:
    """`semdup serve` with SEMDUP_LOG_FORMAT=json and two uvicorn workers: every line it writes (its own records,
    uvicorn's, the tracebacks of a failing call) is one JSON object, and the planted secrets, a password in the
    OpenSearch URL and an ``api_key=...`` that the failing cluster's answer carries into the traceback, never show."""
    import json

    password, api_key = "Pl4ntedPassw0rd", "pl4nted-key-5150"
    with garbage_cluster(f"upstream login failed for http://admin:{password}@db:9200 with api_key={api_key}") as at:
        port = any_free_port()
        env = {
            **os.environ,
            "SEMDUP_API_KEY": KEY,
            "SEMDUP_LOG_FORMAT": "json",
            "SEMDUP_OPENSEARCH_URL": f"http://admin:{password}@{at}",
            "SEMDUP_OPENSEARCH_MAX_RETRIES": "0",
        }
        log_path = tmp_path / "serve.log"
        with log_path.open("wb") as log:
            cmd = [sys.executable, "-m", "semdup", "serve", "--bundle", str(tiny_bundle), "--index", "questions"]
            proc = subprocess.Popen(
                [*cmd, "--port", str(port), "--workers", "2"], env=env, stdout=log, stderr=subprocess.STDOUT
            )
            try:
                base = f"http://127.0.0.1:{port}"
                wait_until_answering(proc, base, log_path)
                for _ in range(4):  # each worker process answers some of them
                    r = httpx.post(f"{base}/v1/rerank", headers=HEADERS, json={"title": "visa for Qatar?"}, timeout=30)
                    assert r.status_code == 500 and r.json()["error"]["type"] == "InternalError"
                    assert api_key not in r.text
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    text = log_path.read_text()
    records = [json.loads(line) for line in text.splitlines() if line.strip()]  # every line is one JSON object
    assert password not in text and api_key not in text
    by_logger: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        assert {"time", "level", "logger", "message"} <= set(r)
        by_logger.setdefault(r["logger"], []).append(r)
    uvicorn_messages = " ".join(r["message"] for r in by_logger.get("uvicorn.error", []))
    assert "Started parent process" in uvicorn_messages and "Application startup complete" in uvicorn_messages
    tracebacks = [r["exception"] for r in records if "exception" in r]
    assert tracebacks and all("SerializationError" in t and "api_key=***" in t for t in tracebacks)
    assert any(r["logger"] == "uvicorn.error" for r in records if "exception" in r)  # uvicorn's own traceback
    started = [r for r in by_logger["semdup.apps.http"] if r["message"].startswith("reranking service:")]
    assert len(started) == 2 and all(f"OpenSearch http://{at}" in r["message"] for r in started)
    failures = [r for r in by_logger["semdup.apps.http"] if r["message"].startswith("unexpected error")]
    assert len(failures) == 4 and all(r["level"] == "ERROR" and "exception" in r for r in failures)
