"""HTTP ingest (``/v1/posts``, ``/sync``, ``/delete``) with an in-memory jobs index and a recording broker: each
request one job whose batches are in the ledger before they are published, batching, auth, index scoping, bounds,
and a broker that is missing, off, down or fails part-way. The real broker and worker: tests/integration/
test_reranker_ingest.py and test_ingest_faults.py."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from jobs_store import JobsStore, RecordingBroker
from settings_tree import service_settings

from semdup.apps.http import create_app
from semdup.apps.settings import load_settings
from semdup.core.errors import ConfigError, SearchIndexError
from semdup.core.settings import BrokerSettings, OpenSearchSettings
from semdup.core.task_names import DELETE_POSTS, INDEX_POSTS, SYNC_POSTS
from semdup.ingest.celery_app import producer_app
from semdup.service.settings import ServiceSettings

OS = OpenSearchSettings(url="http://127.0.0.1:9")
BROKER = BrokerSettings(url="redis://127.0.0.1:9/0")
KEY, COOK_KEY = "key-all-5b1e-7d2f0c9e4b1a", "key-cook-90ad-7d2f0c9e4b1a"  # both with the ingest scope
READ_KEY = "key-read-only-3c8a5e0f1b7d"  # SEMDUP_API_KEY: the search scope only
VERSION = "bow-cnn-0123abcd"


class FakeReranker:
    """``target``: a site's index (travel, cooking) is searched through its companion; ``own`` are indices semdup
    created (searched themselves), ``missing`` do not exist. Its ``client`` holds the jobs' records."""

    version = VERSION

    def __init__(self, own: tuple[str, ...] = (), missing: tuple[str, ...] = ()) -> None:
        self.own, self.missing = own, missing
        self.client = JobsStore()

    def target(self, index: str) -> str:
        if index in self.missing:
            raise SearchIndexError(f"index {index!r} does not exist")
        return index if index in self.own else f"{index}.semdup-0123456789"


def settings(broker: BrokerSettings | None = BROKER, **values: Any) -> ServiceSettings:
    config = {
        "bundle": "b",
        "index": "travel",
        "indices": "travel,cooking",
        "api_key": READ_KEY,
        "api_keys": f"{KEY}:*:search|ingest,{COOK_KEY}:cooking:ingest",
        **values,
    }
    return service_settings(config, OS, broker=broker)


def client(sender: Any = None, reranker: FakeReranker | None = None, **kw: Any) -> TestClient:
    """The service's app with ``sender`` as the Celery app it publishes through (``kw``: its settings)."""
    app = create_app(settings(**kw), reranker=reranker or FakeReranker(), broker=sender)  # type: ignore[arg-type]
    return TestClient(app)


def posts(n: int, start: int = 0) -> list[dict[str, str]]:
    return [{"id": str(i), "title": f"Visa question {i}", "body": "<p>Do I need one?</p>"} for i in range(start, n)]


def test_posts_go_out_in_batches_of_64_as_index_posts_with_the_bundle_version() -> None:
    sender = RecordingBroker()
    r = client(sender).post("/v1/posts", json={"posts": posts(130)}, headers={"X-API-Key": KEY})
    assert r.status_code == 202, r.text
    job = r.json()["job"]
    assert r.json() == {
        "index": "travel", "task": "index_posts", "model": VERSION, "enqueued": 130, "tasks": 3, "job": job,
    }  # fmt: skip
    assert [name for name, _ in sender.sent] == [INDEX_POSTS] * 3
    assert [len(args[1]) for _, args in sender.sent] == [64, 64, 2]
    index, batch, version = sender.sent[2][1]
    assert (index, version) == ("travel", VERSION)
    assert batch[-1] == {"id": "129", "title": "Visa question 129", "body": "<p>Do I need one?</p>"}


def test_a_request_is_one_job_whose_batches_are_in_the_ledger_with_the_messages_they_were_sent_as() -> None:
    """As ``semdup index-posts`` submits a file: so a batch a worker loses can be sent again by the sweeper."""
    sender, reranker = RecordingBroker(), FakeReranker()
    r = client(sender, reranker).post("/v1/posts", json={"posts": posts(70)}, headers={"X-API-Key": KEY})
    assert r.status_code == 202, r.text
    job, docs = r.json()["job"], reranker.client.docs
    assert docs[f"job/{job}"] | {"at": 0, "sent_at": 0} == {
        "kind": "job", "job": job, "index": "travel", "model_version": VERSION, "total": 70, "at": 0,
        "sent": 2, "sent_at": 0,
    }  # fmt: skip
    ledger = reranker.client.batches(job)
    assert [(b["batch"], b["size"], b["task"]) for b in ledger] == [("0", 64, "index_posts"), ("1", 6, "index_posts")]
    assert [m["kwargs"] for m in sender.messages] == [{"job": job, "batch": "0"}, {"job": job, "batch": "1"}]
    assert [m["task_id"] for m in sender.messages] == [f"{job}-0", f"{job}-1"]
    assert [b["call"] for b in ledger] == [{"task": m["name"], "args": m["args"]} for m in sender.messages]


def test_sync_and_delete_send_distinct_ids_in_order() -> None:
    sender = RecordingBroker()
    app = client(sender)
    ids = ["7", "3", "7", "10"]
    r = app.post("/v1/posts/sync", json={"index": "cooking", "ids": ids}, headers={"X-API-Key": KEY})
    assert r.status_code == 202 and r.json()["enqueued"] == 3 and r.json()["task"] == "sync_posts", r.text
    r = app.post("/v1/posts/delete", json={"ids": ["7"]}, headers={"X-API-Key": KEY})
    assert r.status_code == 202 and r.json()["model"] is None, r.text
    assert sender.sent == [(SYNC_POSTS, ["cooking", ["7", "3", "10"], VERSION]), (DELETE_POSTS, ["travel", ["7"]])]


def test_sync_into_an_index_semdup_created_is_refused_up_front_and_nothing_is_sent() -> None:
    """Such an index has no site's index behind it: the workers would park every id as "has no semdup companion"
    after a 202. A served index that does not exist gets rerank's 404."""
    sender = RecordingBroker()
    app = client(sender, reranker=FakeReranker(own=("travel",), missing=("cooking",)))
    r = app.post("/v1/posts/sync", json={"ids": ["1", "2"]}, headers={"X-API-Key": KEY})
    assert r.status_code == 409 and r.json()["error"]["type"] == "NotASiteIndex", r.text
    assert "POST /v1/posts" in r.json()["error"]["message"]
    r = app.post("/v1/posts/sync", json={"index": "cooking", "ids": ["1"]}, headers={"X-API-Key": KEY})
    assert r.status_code == 404 and "not one this API key may search" in r.json()["error"]["message"], r.text
    assert sender.sent == []
    r = app.post("/v1/posts", json={"posts": posts(1)}, headers={"X-API-Key": KEY})  # the way in for such an index
    assert r.status_code == 202 and sender.sent[0][0] == INDEX_POSTS, r.text
    doc = app.app.openapi()["paths"]
    assert "409" in doc["/v1/posts/sync"]["post"]["responses"] and "409" not in doc["/v1/posts"]["post"]["responses"]


@pytest.mark.parametrize("path", ["/v1/posts", "/v1/posts/sync", "/v1/posts/delete"])
def test_keys_and_indices_are_checked_like_rerank_and_nothing_is_sent(path: str) -> None:
    sender = RecordingBroker()
    app = client(sender)
    body: dict[str, Any] = {"posts": posts(1)} if path == "/v1/posts" else {"ids": ["1"]}
    for headers in ({}, {"X-API-Key": "wrong"}, {"X-API-Key": KEY + " "}):
        r = app.post(path, json=body, headers=headers)
        assert r.status_code == 401 and r.json()["error"]["type"] == "Unauthorized", r.text
    for key, index in ((COOK_KEY, "travel"), (KEY, "*"), (KEY, "_all"), (KEY, "travel,cooking"), (KEY, "other")):
        r = app.post(path, json={**body, "index": index}, headers={"X-API-Key": key})
        assert r.status_code == 404 and r.json()["error"]["type"] == "SearchIndexError", (key, index, r.text)
        assert "not one this API key may search" in r.json()["error"]["message"]
    for key in (READ_KEY,):  # a search key may be in a browser: it never writes
        r = app.post(path, json=body, headers={"X-API-Key": key})
        assert r.status_code == 403 and r.json()["error"]["type"] == "Forbidden", r.text
        assert "no ingest scope" in r.json()["error"]["message"]
    assert sender.sent == []
    r = app.post(path, json=body, headers={"X-API-Key": COOK_KEY})  # no index named: the key's own
    assert r.status_code == 202 and r.json()["index"] == "cooking", r.text
    assert [args[0] for _, args in sender.sent] == ["cooking"]


def test_bad_input_is_refused_whole_with_a_clear_message_and_nothing_is_sent() -> None:
    sender = RecordingBroker()
    app = client(sender, max_ingest_posts=100, max_text_chars=50)
    post = {"id": "1", "title": "Visa?"}
    refused = {
        "/v1/posts": [
            {"posts": []},
            {"posts": posts(101)},
            {"posts": [{"id": "", "title": "Visa?"}]},
            {"posts": [{"id": "é" * 257, "title": "Visa?"}]},  # 257 characters, 514 bytes
            {"posts": [{"id": "1", "title": " ", "body": "\n"}]},
            {"posts": [{"id": "1", "title": "x" * 51}]},
            {"posts": [post, {**post, "body": "again"}]},
            {"posts": [{**post, "tags": ["visa"]}]},
            {"posts": [{"id": 1, "title": "Visa?"}]},
            {"posts": [{"id": "1\x00", "title": "Visa?"}]},
            {"posts": [post], "index": ""},
            {"post": [post]},
        ],
        "/v1/posts/sync": [{"ids": []}, {"ids": [str(i) for i in range(101)]}, {"ids": [""]}, {"ids": [7]}],
        "/v1/posts/delete": [{"ids": ["x" * 513]}, {"ids": "1"}, {}],
    }
    for path, bodies in refused.items():
        for body in bodies:
            r = app.post(path, json=body, headers={"X-API-Key": KEY})
            assert r.status_code == 422, (path, body, r.text)
            assert r.json()["error"]["type"] == "ValidationError" and r.json()["detail"], r.text
    r = app.post("/v1/posts", json={"posts": [post, {**post, "body": "again"}]}, headers={"X-API-Key": KEY})
    assert "appears twice" in r.json()["error"]["message"]
    r = app.post("/v1/posts", json={"posts": [{"id": "é" * 257, "title": "V"}]}, headers={"X-API-Key": KEY})
    assert "512 bytes" in r.json()["error"]["message"]
    assert sender.sent == []
    r = app.post("/v1/posts", json={"posts": [{"id": "é" * 256, "body": "ok"}]}, headers={"X-API-Key": KEY})
    assert r.status_code == 202, r.text  # exactly 512 bytes


def test_a_broker_failing_part_way_is_a_503_that_says_how_many_went_out() -> None:
    sender = RecordingBroker(fail_at=3)
    r = client(sender).post("/v1/posts", json={"posts": posts(200)}, headers={"X-API-Key": KEY})
    assert r.status_code == 503, r.text
    body = r.json()
    assert body["error"]["type"] == "EnqueueFailed"
    assert (body["enqueued"], body["tasks"]) == (128, 2) and len(sender.sent) == 2
    assert "128 of 200 were enqueued in 2 task(s)" in body["error"]["message"]
    assert "ConnectionRefusedError" in body["error"]["message"]


def test_without_a_broker_or_with_ingest_off_the_endpoints_answer_503_and_say_why() -> None:
    r = client(broker=None).post("/v1/posts/sync", json={"ids": ["1"]}, headers={"X-API-Key": KEY})
    assert r.status_code == 503 and r.json()["error"]["type"] == "BrokerUnavailable", r.text
    assert "SEMDUP_BROKER_URL" in r.json()["error"]["message"]
    sender = RecordingBroker()
    r = client(sender, ingest="0").post("/v1/posts", json={"posts": posts(1)}, headers={"X-API-Key": KEY})
    assert r.status_code == 503 and "SEMDUP_INGEST=0" in r.json()["error"]["message"], r.text
    assert sender.sent == []
    # auth and index checks come first: a wrong key learns nothing about the broker
    assert client(broker=None).post("/v1/posts/sync", json={"ids": ["1"]}).status_code == 401


def test_ingest_is_on_by_default_only_with_a_broker() -> None:
    assert settings().ingest is True and settings(broker=None).ingest is False
    assert settings(ingest="off").ingest is False and settings(max_ingest_posts="10").max_ingest_posts == 10
    with pytest.raises(ConfigError, match="SEMDUP_BROKER_URL"):
        settings(broker=None, ingest="1")
    env = {"SEMDUP_BUNDLE": "b", "SEMDUP_INDEX": "travel", "SEMDUP_API_KEY": READ_KEY, "SEMDUP_OPENSEARCH_URL": OS.url}
    assert load_settings(env=env).service_settings().broker is None
    on = load_settings(env={**env, "SEMDUP_BROKER_URL": "redis://:s3cr3t@h:6379/0"}).service_settings()
    assert on.ingest is True and on.broker is not None and "s3cr3t" not in repr(on)
    off = load_settings(env={**env, "SEMDUP_BROKER_URL": "redis://h/0", "SEMDUP_INGEST": "0"}).service_settings()
    assert off.ingest is False
    with pytest.raises(ConfigError, match="unknown reranker setting"):
        settings(broker_url="redis://h/0")  # the broker comes from SEMDUP_BROKER_URL / the broker: section


def test_a_real_celery_client_on_a_closed_port_answers_503_quickly() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: connection refused
    sender = producer_app(f"redis://127.0.0.1:{port}/0", timeout=2.0)
    start = time.monotonic()
    r = client(sender).post("/v1/posts", json={"posts": posts(3)}, headers={"X-API-Key": KEY})
    took = time.monotonic() - start
    assert r.status_code == 503 and (r.json()["enqueued"], r.json()["tasks"]) == (0, 0), r.text
    assert "0 of 3 were enqueued" in r.json()["error"]["message"]
    assert took < 15, took


def test_tasks_go_to_the_queue_the_workers_consume() -> None:
    from semdup.ingest.celery_app import QUEUE, app, celery_config

    sender = producer_app("redis://127.0.0.1:9/0")
    assert sender is not app  # the service's own: its request threads wait 5 s at most for the broker
    assert sender.conf.task_default_queue == QUEUE == celery_config("redis://h/0")["task_default_queue"]
    assert sender.conf.task_serializer == "json" and sender.conf.accept_content == ["json"]
    assert sender.conf.broker_connection_timeout == 5.0


def test_the_openapi_document_states_202_503_and_the_bounds() -> None:
    doc = client(RecordingBroker(), max_ingest_posts=100).app.openapi()
    for path in ("/v1/posts", "/v1/posts/sync", "/v1/posts/delete"):
        op = doc["paths"][path]["post"]
        assert {"202", "401", "404", "413", "422", "503"} <= set(op["responses"]), path
        assert op["security"] == [{"APIKeyHeader": []}]
    schemas = doc["components"]["schemas"]
    assert schemas["IngestPosts"]["properties"]["posts"]["maxItems"] == 100
    assert schemas["IngestIds"]["properties"]["ids"]["items"]["maxLength"] == 512
    assert schemas["IngestPosts"]["additionalProperties"] is False


# One table of ids, driven through the HTTP models, the CLI's reader and the OpenAPI schema: all three must take and
# refuse the same ones (semdup.core.post_rules is the one rule set behind them). Deleting takes every id the index
# can hold (semdup.core.post_rules.opensearch_id_problem), so a post written before the stricter rules can go.
ID_CASES = [
    "7",
    "Q1_R3",
    " a ",
    "a" * 512,
    "a" * 513,
    "é" * 256,
    "é" * 256 + "a",
    "a" + "é" * 256,
    "€" * 170 + "ab",
    "€" * 171,
    "😀" * 128,
    "😀" * 127 + "abcde",
    "",
    " ",
    "\t",
    "\u3000",
    "\ufeff",
    "a\x01b",
    "a\x00",
    "a\tb",
    "a\nb",
    "a\r",
    "a\x7f",
    "a\x85",
    "a\x9f",
    "a\ufffd",
    "a\ud800",
    "dé/jà vu?",
    "\u200b\u200c\u200d",  # only zero-width characters: shows as no id (issue #34)
    " \u200b\u2060 ",
    "a\u200b",
    "p4-\u202e",  # a bidi control: refused for new posts, still deletable
]


def _schema_takes(schema: dict[str, Any], value: str) -> bool:
    """The id's JSON Schema, evaluated as a client would: lengths in code points, the pattern with ECMA-262's ``$``
    (pydantic-core's Rust regex means the same), and the stated UTF-8 byte limit."""
    from typing import Annotated

    from pydantic import Field, TypeAdapter, ValidationError

    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False  # not a JSON string any client can send
    if not schema["minLength"] <= len(value) <= schema["maxLength"]:
        return False
    if len(value.encode("utf-8")) > schema["x-max-utf8-bytes"]:
        return False
    if "pattern" not in schema:  # a delete's id: OpenSearch's limits only
        return True
    try:
        TypeAdapter(Annotated[str, Field(pattern=schema["pattern"])]).validate_python(value)
    except ValidationError:
        return False
    return True


def _send(app: TestClient, path: str, body: dict[str, Any]) -> Any:
    """POST ``body`` as ASCII JSON (``\\u`` escapes), so a lone surrogate goes out as JSON can carry it."""
    headers = {"X-API-Key": KEY, "Content-Type": "application/json"}
    return app.post(path, content=json.dumps(body).encode("ascii"), headers=headers)


def test_the_http_models_the_cli_reader_the_workers_and_the_schema_take_exactly_the_same_ids(tmp_path) -> None:
    from semdup.core.post_rules import id_problem, opensearch_id_problem
    from semdup.data.posts_input import read_post_input
    from semdup.indexer.batch_writer import BatchResult, _parse_posts

    sender = RecordingBroker()
    app = client(sender)
    schemas = app.app.openapi()["components"]["schemas"]
    schema = schemas["PostIn"]["properties"]["id"]
    delete_schema = schemas["IngestIds"]["properties"]["ids"]["items"]
    source = tmp_path / "posts.jsonl"
    lines = [json.dumps({"id": "anchor", "title": "A post every reader takes"})]
    lines += [json.dumps({"id": post_id, "title": "Visa?"}) for post_id in ID_CASES]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    read = read_post_input(source)
    cli_took = {p.id for p in read.posts}
    cli_reason = {int(s.where.split()[1]) - 2: s.reason for s in read.skipped}

    for n, post_id in enumerate(ID_CASES):
        rule = id_problem(post_id)
        posted = _send(app, "/v1/posts", {"posts": [{"id": post_id, "title": "Visa?"}]})
        deleted = _send(app, "/v1/posts/delete", {"ids": [post_id]})
        http_took = posted.status_code == 202
        deletable = opensearch_id_problem(post_id) is None and _schema_takes(delete_schema, post_id)
        assert (deleted.status_code == 202) == deletable, (post_id, deleted.text)
        synced = _send(app, "/v1/posts/sync", {"ids": [post_id]})  # re-read (or removed) by id: the same ids
        assert (synced.status_code == 202) == deletable, (post_id, synced.text)
        assert deletable or not http_took  # every id a post may have can be deleted
        parked = BatchResult()  # a producer that bypasses both: the worker parks what the rules refuse
        worker_took = bool(_parse_posts([json.loads(json.dumps({"id": post_id, "title": "Visa?"}))], parked))
        assert http_took == (post_id in cli_took) == worker_took == _schema_takes(schema, post_id) == (rule is None), (
            post_id[:20],
            posted.text[:300],
            cli_reason.get(n),
        )
        if rule is not None:
            assert posted.status_code == 422, posted.text
            if "surrogate" not in rule:  # pydantic refuses a lone surrogate before the rules: not valid Unicode
                assert rule in posted.json()["error"]["message"], posted.text
                assert posted.json()["detail"][0]["loc"] == ["body", "posts", 0, "id"]
            assert cli_reason[n] == rule  # the same words from every path
            assert str(parked.failed[0]).endswith(f": {rule}"), parked.failed
    deletable = [i for i in ID_CASES if opensearch_id_problem(i) is None and _schema_takes(delete_schema, i)]
    assert len(sender.sent) == sum(id_problem(i) is None for i in ID_CASES) + 2 * len(deletable)
    assert {"p4-\u202e", "\u200b\u200c\u200d", "a\x01b"} <= set(deletable)


TEXT_CASES = [
    ("Visa?", ""),
    ("", "<p>How long?</p>"),
    ("line\nnext\r\n\ttab", ""),
    ("", ""),
    (" ", "\n"),
    ("<p></p>", "&nbsp;"),
    ("a\x01", ""),
    ("", "caf\ufffd"),
    ("a\x7f", ""),
    ("x" * 51, ""),
]


def test_the_http_models_and_the_cli_reader_take_the_same_titles_and_bodies(tmp_path) -> None:
    """The same for text, with the server's limit on the CLI's side too (max_text_chars 50 here)."""
    from semdup.core.post_rules import post_problem
    from semdup.core.posts import Post
    from semdup.data.posts_input import read_post_input

    app = client(RecordingBroker(), max_text_chars=50)
    source = tmp_path / "posts.jsonl"
    lines = [json.dumps({"id": "anchor", "title": "A post every reader takes"})]
    lines += [json.dumps({"id": f"p{n}", "title": t, "body": b}) for n, (t, b) in enumerate(TEXT_CASES)]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cli_took = {p.id for p in read_post_input(source).posts if len(p.title) <= 50 and len(p.body) <= 50}
    for n, (title, body) in enumerate(TEXT_CASES):
        post = {"id": f"p{n}", "title": title, "body": body}
        r = app.post("/v1/posts", json={"posts": [post]}, headers={"X-API-Key": KEY})
        rule = post_problem(Post(**post), max_text_chars=50)
        assert (r.status_code == 202) == (f"p{n}" in cli_took) == (rule is None), (post, r.text)
        if rule is not None and "characters; at most" not in rule:
            assert rule in r.json()["error"]["message"], r.text


def test_a_batch_with_bad_posts_is_refused_whole_and_each_bad_post_is_named() -> None:
    """The HTTP ingest answers per post where it can: one 422 whose detail names every bad post by its position
    and why, and nothing is enqueued (the client holds the posts; it resends the batch fixed)."""
    sender = RecordingBroker()
    batch = posts(5)
    batch[1]["id"] = " "
    batch[3] = {"id": "3", "title": "<p></p>"}
    batch[4]["body"] = "bin\x00ary"
    r = client(sender).post("/v1/posts", json={"posts": batch}, headers={"X-API-Key": KEY})
    assert r.status_code == 422, r.text
    named = [(item["loc"][2:], item["msg"]) for item in r.json()["detail"]]
    assert named == [
        ([1, "id"], "Value error, id is only white space"),
        ([3], "Value error, post '3': no visible text (only markup, code, white space or invisible characters)"),
        ([4, "body"], "Value error, body holds control character U+0000 at character 4"),
    ]
    assert r.json()["error"]["message"].startswith("posts.1.id: Value error, id is only white space")
    assert sender.sent == []


def test_an_unknown_query_parameter_is_refused_naming_it_after_the_key_check() -> None:
    """Issue #34: ``POST /v1/posts?index=other`` wrote to the key's default index, the parameter silently ignored."""
    sender = RecordingBroker()
    app = client(sender)
    for path, body in (
        ("/v1/posts", {"posts": posts(1)}),
        ("/v1/posts/delete", {"ids": ["1"]}),
        ("/v1/posts/sync", {"ids": ["1"]}),
        ("/v1/rerank", {"title": "Visa?"}),
    ):
        r = app.post(path + "?index=cooking&dry_run=1", json=body, headers={"X-API-Key": KEY})
        assert r.status_code == 422, (path, r.text)
        message = r.json()["error"]["message"]
        assert message.startswith("unknown query parameters 'index', 'dry_run': this endpoint does not read"), message
        assert [d["loc"] for d in r.json()["detail"]] == [["query", "index"], ["query", "dry_run"]]
        assert app.post(path + "?index=cooking", json=body).status_code == 401  # no key: nothing said of the query
    r = app.get("/v1/similar?title=Visa&index=travel&sise=3", headers={"X-API-Key": KEY})
    assert r.status_code == 422 and "unknown query parameter 'sise'" in r.json()["error"]["message"], r.text
    assert sender.sent == []
    assert (
        app.post("/v1/posts", json={"index": "cooking", "posts": posts(1)}, headers={"X-API-Key": KEY}).json()["index"]
        == "cooking"
    )  # in the body, where the schema has it
