"""No planted secret shows in anything semdup writes (issue #13, item 6): the CLI failing on purpose, in text and in
JSON log mode, a Celery worker and the HTTP service.

Planted: a password in the broker URL, a password in the OpenSearch URL, the service's API key, and a password
and an ``api_key=`` that a broken cluster sends back in its answers (so they reach error messages and tracebacks
the way a real upstream error would). Every byte of stdout and stderr is searched for each of them.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from stub_servers import garbage_cluster, wait_until_answering

from semdup.core.posts import Post
from semdup.devstack.local_process import any_free_port

pytestmark = pytest.mark.slow

TAG = secrets.token_hex(4)
BROKER_PW, OPENSEARCH_PW, API_KEY = f"Br0ker-{TAG}", f"0penS-{TAG}", f"api-key-{TAG}-{TAG}-{TAG}"
UPSTREAM_PW, UPSTREAM_KEY = f"Upstr3am-{TAG}", f"upkey-{TAG}"
PLANTED = (BROKER_PW, OPENSEARCH_PW, API_KEY, UPSTREAM_PW, UPSTREAM_KEY)
UPSTREAM_ANSWER = f"upstream login failed for http://admin:{UPSTREAM_PW}@db:9200 with api_key={UPSTREAM_KEY}"


def with_password(url: str, password: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://admin:{password}@{rest}"


def assert_clean(text: str, json_mode: bool, what: str) -> None:
    for secret in PLANTED:
        assert secret not in text, f"{what}: {secret!r} leaked:\n{text[-3000:]}"
    if json_mode:
        for line in text.splitlines():
            if line.strip():
                record = json.loads(line)  # every line one JSON object
                assert {"time", "level", "logger", "message"} <= set(record), line


def run_cli(args: list[str], env: dict[str, str], json_mode: bool) -> subprocess.CompletedProcess:
    env = {**env, "SEMDUP_LOG_FORMAT": "json" if json_mode else "text"}
    return subprocess.run(
        [sys.executable, "-m", "semdup", *args], env=env, capture_output=True, text=True, timeout=180, check=False
    )


@pytest.fixture(scope="module")
def base_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEMDUP_")}
    return {**env, "SEMDUP_OPENSEARCH_MAX_RETRIES": "0", "SEMDUP_OPENSEARCH_TIMEOUT": "5"}


@pytest.fixture(scope="module")
def posts_file(real_posts: list[Post], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secrets") / "posts.jsonl"
    blank = Post("blank-1", " ", "<p> </p>")  # skipped by the CLI's reader (core.post_rules): an error path with a log line
    path.write_text("".join(json.dumps(p.to_json()) + "\n" for p in [*real_posts[:6], blank]), encoding="utf-8")
    return path


@pytest.mark.parametrize("json_mode", [False, True], ids=["text", "json"])
def test_cli_errors_show_no_secret(
    json_mode: bool, base_env: dict[str, str], tiny_bundle: Path, posts_file: Path, opensearch_url: str
) -> None:
    dead = f"http://127.0.0.1:{any_free_port()}"
    broker_down = f"redis://:{BROKER_PW}@127.0.0.1:{any_free_port()}/7"
    live = with_password(opensearch_url, OPENSEARCH_PW)  # the embedded node ignores the credentials
    cases = [  # (args, environment, exit code, what the Error line says)
        (
            ["index-posts", "--input", str(posts_file), "--index", "secrets-x", "--bundle", str(tiny_bundle)],
            {"SEMDUP_BROKER_URL": broker_down, "SEMDUP_OPENSEARCH_URL": live},
            1,
            "redis://***@127.0.0.1",
        ),
        (
            ["rerank", "--bundle", str(tiny_bundle), "--index", "secrets-x", "--title", "visa?"],
            {"SEMDUP_OPENSEARCH_URL": with_password(dead, OPENSEARCH_PW)},
            1,
            "no OpenSearch at",
        ),
        (
            ["rerank", "--bundle", str(tiny_bundle), "--index", "_search", "--title", "visa?"],
            {"SEMDUP_OPENSEARCH_URL": live},
            1,
            "index name '_search' must not start with '_'",
        ),
        (
            ["index-posts", "--index", "secrets-x", "--batch-size", broker_down],  # a usage error echoing a value
            {"SEMDUP_OPENSEARCH_URL": live},
            2,
            "redis://***@127.0.0.1",
        ),
        (
            ["serve", "--bundle", str(tiny_bundle), "--index", "secrets-x", "--port", str(any_free_port())],
            {"SEMDUP_OPENSEARCH_URL": live, "SEMDUP_API_KEYS": f"{API_KEY} :secrets-x"},  # malformed entry
            1,
            "entry 1 of SEMDUP_API_KEYS",
        ),
    ]
    for args, env, code, said in cases:
        out = run_cli(args, {**base_env, **env}, json_mode)
        assert out.returncode == code, (args, out.stderr[-2000:])
        assert said in out.stderr, (args, out.stderr[-2000:])
        assert "Traceback" not in out.stderr or json_mode, out.stderr[-2000:]
        assert_clean(out.stdout, False, f"stdout of {args[0]}")
        assert_clean(out.stderr, json_mode, f"stderr of {args[0]}")


@pytest.mark.parametrize("json_mode", [False, True], ids=["text", "json"])
def test_a_cluster_answering_secrets_gives_a_scrubbed_error_line(
    json_mode: bool, base_env: dict[str, str], tiny_bundle: Path
) -> None:
    """An answer no semdup layer expects (not JSON, carrying a URL with a password and an api_key) ends as one
    scrubbed Error line of the CLI, not a traceback holding it."""
    with garbage_cluster(UPSTREAM_ANSWER) as upstream:
        env = {**base_env, "SEMDUP_OPENSEARCH_URL": with_password(f"http://{upstream}", OPENSEARCH_PW)}
        out = run_cli(["rerank", "--bundle", str(tiny_bundle), "--index", "posts", "--title", "visa?"], env, json_mode)
    assert out.returncode == 1 and "Error: OpenSearch client error SerializationError" in out.stderr, out.stderr
    assert "http://***@db:9200" in out.stderr and "api_key=***" in out.stderr
    assert_clean(out.stdout + out.stderr, json_mode, "rerank against a broken cluster")


@pytest.fixture(scope="module")
def protected_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Redis that requires a password: the broker URL carries it."""
    port = any_free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--requirepass", BROKER_PW, "--save", "",
         "--appendonly", "no", "--dir", str(tmp_path_factory.mktemp("redis"))],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import redis

    url = f"redis://:{BROKER_PW}@127.0.0.1:{port}/5"
    deadline = time.monotonic() + 30  # waiting for start-up, not a timing assertion
    while True:
        try:
            redis.Redis.from_url(url, socket_timeout=1).ping()
            break
        except redis.RedisError:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail("redis-server with a password did not start")
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(timeout=30)


@pytest.mark.parametrize("json_mode", [False, True], ids=["text", "json"])
def test_worker_and_index_job_show_no_secret(
    json_mode: bool,
    base_env: dict[str, str],
    tiny_bundle: Path,
    posts_file: Path,
    protected_redis: str,
    opensearch_url: str,
    opensearch_client: Any,
    tmp_path: Path,
) -> None:
    """A real `semdup worker` on a password-protected Redis and a cluster URL with a password indexes a job (one
    line skipped by the reader, the rest written); then a worker whose cluster answers with secrets fails to start.
    Nothing they print holds one."""
    index = f"semdup-test-secrets-{TAG}-{'json' if json_mode else 'text'}"
    env = {
        **base_env,
        "SEMDUP_LOG_FORMAT": "json" if json_mode else "text",
        "SEMDUP_BROKER_URL": protected_redis,
        "SEMDUP_OPENSEARCH_URL": with_password(opensearch_url, OPENSEARCH_PW),
        "SEMDUP_BUNDLE": str(tiny_bundle),
    }
    log = tmp_path / "worker.log"
    with log.open("wb") as sink:
        worker = subprocess.Popen(
            [sys.executable, "-m", "semdup", "-v", "worker", "-c", "1"],
            env=env,
            stdout=sink,
            stderr=sink,
            start_new_session=True,
        )
        try:
            job = subprocess.run(
                [sys.executable, "-m", "semdup", "-v", "index-posts", "--input", str(posts_file), "--index", index,
                 "--timeout", "150"],
                env=env,
                capture_output=True,
                text=True,
                timeout=240,
                check=False,
            )
        finally:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=60)
    opensearch_client.indices.delete(index=index, ignore_unavailable=True)
    assert "skipped 1 line" in job.stdout and "6 posts written" in job.stdout, job.stdout + job.stderr[-2000:]
    assert_clean(job.stdout, False, "index-posts stdout")
    assert_clean(job.stderr, json_mode, "index-posts stderr")
    text = log.read_text()
    assert "index_posts" in text, text[-3000:]
    assert_clean(text, False, "worker output")  # Celery's banner goes to stdout as text in both modes
    if json_mode:
        assert_clean("\n".join(x for x in text.splitlines() if x.startswith("{")), True, "worker JSON lines")

    with garbage_cluster(UPSTREAM_ANSWER) as upstream:
        broken = {**env, "SEMDUP_OPENSEARCH_URL": with_password(f"http://{upstream}", OPENSEARCH_PW)}
        out = subprocess.run(
            [sys.executable, "-m", "semdup", "worker", "-c", "1"],
            env=broken,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    assert out.returncode == 1 and "SerializationError" in out.stderr, out.stderr[-2000:]
    assert_clean(out.stdout + out.stderr, False, "worker against a broken cluster")


@pytest.mark.parametrize("json_mode", [False, True], ids=["text", "json"])
def test_service_answers_and_logs_show_no_secret(
    json_mode: bool, base_env: dict[str, str], tiny_bundle: Path, served: Any, tmp_path: Path
) -> None:
    """`semdup serve` with the key planted and a cluster that answers with secrets: its answers (401, 404, 500,
    readyz's reason, the OpenAPI document) and every line it logs hold none of them."""
    _, index = served
    with garbage_cluster(UPSTREAM_ANSWER) as upstream:
        port = any_free_port()
        env = {
            **base_env,
            "SEMDUP_LOG_FORMAT": "json" if json_mode else "text",
            "SEMDUP_API_KEY": API_KEY,
            "SEMDUP_OPS_AUTH": "0",  # the operators' endpoints answer anyone: what they say is checked too
            "SEMDUP_OPENSEARCH_URL": with_password(f"http://{upstream}", OPENSEARCH_PW),
        }
        log = tmp_path / "serve.log"
        answers: list[str] = []
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                [sys.executable, "-m", "semdup", "serve", "--bundle", str(tiny_bundle), "--index", index,
                 "--port", str(port), "--workers", "1"],
                env=env,
                stdout=sink,
                stderr=sink,
            )
            try:
                base = f"http://127.0.0.1:{port}"
                wait_until_answering(proc, base, log)
                good = {"X-API-Key": API_KEY}
                calls = [
                    ("post", "/v1/rerank", {"title": "visa?"}, good, 500),
                    ("post", "/v1/rerank", {"title": "visa?", "index": "_search"}, good, 404),
                    ("post", "/v1/rerank", {"title": "visa?"}, {"X-API-Key": API_KEY[:-1]}, 401),
                    ("post", "/v1/rerank", {"title": ""}, good, 422),
                    ("get", "/readyz", None, {}, 503),
                    ("get", "/openapi.json", None, {}, 200),
                    ("get", "/metrics", None, {}, 200),
                ]
                for method, path, body, headers, status in calls:
                    r = httpx.request(method, f"{base}{path}", json=body, headers=headers, timeout=30)
                    assert r.status_code == status, (path, r.text[:500])
                    answers.append(r.text)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    assert_clean("\n".join(answers), False, "service answers")
    text = log.read_text()
    assert "SerializationError" in text  # the failing call was logged, traceback and all
    assert_clean(text, json_mode, "service log")
