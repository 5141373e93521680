"""A key does only what its scope says, guessing costs time, and a logout ends the session (issue #25), on a real
`semdup serve` with 2 uvicorn workers, a real OpenSearch (the sessions' store) and a real Redis (the ingest broker).

Every request opens a new connection (:func:`ask`: a new client each time), so the kernel spreads them over both
workers: the failure counts and the sessions must be the service's, not a worker's. Each test speaks from its own
client address, a loopback address of its own that its connections are bound to (127.0.0.0/8 is all loopback),
so one test's failures never block another's; ``X-Forwarded-For`` chooses nothing (issue #34: it is read only from
the reverse proxies named in SEMDUP_FORWARDED_ALLOW_IPS, and a real nginx in front of a service shows it). No
answer is a 5xx (:func:`ask` asserts it on every call).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from reverse_proxy import nginx_in_front
from review_stack import semdup_serve, serve_env

from semdup.bundle import Bundle
from semdup.devstack.local_process import any_free_port

pytestmark = [pytest.mark.opensearch, pytest.mark.broker, pytest.mark.slow]

SEARCH, INGEST = "search-only-6e1f0a9c3d7b52e8", "ingest-site-2b7d9e4f0c1a6358"
ALICE, BOB, OPS = "review-alice-8c3e1b9f5a07d264", "review-bob-4f9a2c7e1d03b685", "ops-prom-1a5c9e3b7f2d0846"
BLOCK_S = 2  # SEMDUP_AUTH_BLOCK here: short, so the test sees a client recover
LIMIT = 5  # SEMDUP_AUTH_FAILURES


def keys(index: str, *, bob: bool = True) -> str:
    entries = [f"{SEARCH}:{index}", f"{INGEST}:{index}:search|ingest:site", f"{ALICE}:{index}:review:alice"]
    entries += [f"{BOB}:{index}:review:bob"] if bob else []
    return ",".join([*entries, f"{OPS}:*:ops:prom"])


def env_for(opensearch_url: str, redis_url: str, tiny_bundle: Path, index: str, **extra: str) -> dict[str, str]:
    return serve_env(
        opensearch_url,
        tiny_bundle,
        index,
        keys(index),
        SEMDUP_BROKER_URL=redis_url,
        SEMDUP_AUTH_FAILURES=str(LIMIT),
        SEMDUP_AUTH_WINDOW="60",
        SEMDUP_AUTH_BLOCK=str(BLOCK_S),
        **extra,
    )


@pytest.fixture(scope="module")
def service(
    served: tuple[Bundle, str], tiny_bundle: Path, opensearch_url: str, redis_url: str, tmp_path_factory: Any
) -> Iterator[dict[str, Any]]:
    _, index = served
    root = tmp_path_factory.mktemp("serve-keys")
    env = env_for(opensearch_url, redis_url, tiny_bundle, index)
    with semdup_serve(env, root / "serve.log", workers=2) as base:
        yield {"base": base, "index": index, "env": env, "log": root / "serve.log", "root": root}


def browser(address: str, **kw: Any) -> httpx.Client:
    """A client whose connections come from ``address`` (a loopback address: the service sees it as the client)."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=60, **kw)


def ask(
    method: str, url: str, address: str, key: str | None = None, allow_503: bool = False, **kw: Any
) -> httpx.Response:
    """One request on a new connection, from ``address``; never a 5xx (but 503 where ``allow_503``)."""
    headers = dict(kw.pop("headers", {}))
    if key is not None:
        headers["X-API-Key"] = key
    with browser(address) as client:
        r = client.request(method, url, headers=headers, **kw)
    assert r.status_code < 500 or (allow_503 and r.status_code == 503), (method, url, r.status_code, r.text[:300])
    return r


def test_a_search_key_gets_403_on_every_write_and_delete_and_reads_as_before(service: dict[str, Any]) -> None:
    base, index, at = service["base"], service["index"], "127.0.0.11"
    writes = {
        "/v1/posts": {"posts": [{"id": "keys-test-1", "title": "Visa for Qatar?"}]},
        "/v1/posts/delete": {"ids": ["keys-test-no-such-post"]},
        "/v1/posts/sync": {"ids": ["keys-test-no-such-post"]},
    }
    for path, body in writes.items():
        for key in (SEARCH, ALICE, OPS):  # read-only, review-only, ops-only: none writes
            r = ask("POST", base + path, at, key, json=body)
            assert r.status_code == 403 and r.json()["error"]["type"] == "Forbidden", (path, r.text)
            assert "no ingest scope" in r.json()["error"]["message"]
    r = ask("POST", base + "/v1/posts/delete", at, INGEST, json=writes["/v1/posts/delete"])
    assert r.status_code == 202 and r.json()["task"] == "delete_posts", r.text  # the ingest scope writes
    assert ask("POST", base + "/v1/rerank", at, SEARCH, json={"title": "visa", "k": 3}).status_code == 200
    assert ask("GET", base + "/v1/similar", at, SEARCH, params={"title": "visa", "index": index}).status_code == 200
    review_only = ask("POST", base + "/v1/rerank", at, ALICE, json={"title": "visa"})
    assert review_only.status_code == 403 and "no search scope" in review_only.json()["error"]["message"]
    log = service["log"].read_text()  # the start warned about the search key that may have ingested before
    assert "hold the search scope but not ingest" in log and "entry 1 of SEMDUP_API_KEYS" in log
    assert not any(key in log for key in (SEARCH, INGEST, ALICE, BOB, OPS))


def test_repeated_failures_get_429_and_the_client_recovers_after_retry_after(service: dict[str, Any]) -> None:
    base, index, guesser, other = service["base"], service["index"], "127.0.0.22", "127.0.0.23"
    similar = base + "/v1/similar"
    params = {"title": "visa", "index": index}
    statuses = [ask("GET", similar, guesser, f"guess-{i:020d}", params=params).status_code for i in range(LIMIT)]
    assert statuses == [401] * (LIMIT - 1) + [429]  # counted across both workers: the LIMIT-th starts the block
    blocked = ask("GET", similar, guesser, SEARCH, params=params)
    assert blocked.status_code == 429 and blocked.json()["error"]["type"] == "TooManyFailures"
    wait = int(blocked.headers["retry-after"])
    assert 1 <= wait <= BLOCK_S
    with browser(guesser, base_url=base) as page:
        token = re.search(r'name="csrf" value="([^"]+)"', page.get("/review/login").text).group(1)
        login = page.post("/review/login", data={"key": ALICE, "csrf": token})  # logins share the count
        assert login.status_code == 429 and "semdup_review" not in page.cookies, login.text
    assert ask("GET", similar, other, SEARCH, params=params).status_code == 200  # another address is not slowed
    assert ask("GET", base + "/metrics", guesser, OPS).status_code == 429  # the ops key waits too
    time.sleep(wait + 0.5)
    assert ask("GET", similar, guesser, SEARCH, params=params).status_code == 200  # recovered
    metrics = ask("GET", base + "/metrics", other, OPS).text  # this worker's counts (each worker has its own)
    assert "semdup_auth_failures_total" in metrics and "semdup_auth_throttled_total" in metrics


def _login(base: str, at: str, key: str) -> tuple[httpx.Client, str, str]:
    """A browser's session: (the client holding the cookie, the cookie's value, the page's CSRF token)."""
    client = browser(at, base_url=base)
    form = client.get("/review/login")
    token = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)
    r = client.post("/review/login", data={"key": key, "csrf": token})
    assert r.status_code == 303, r.text
    page = client.get("/review")
    assert page.status_code == 200, page.text
    csrf = re.search(r'<meta name="csrf-token" content="([^"]+)">', page.text).group(1)
    return client, client.cookies["semdup_review"], csrf


def _replay(base: str, at: str, cookie: str, csrf: str, index: str) -> tuple[int, int]:
    """(GET /review, POST a verdict) with a copied cookie, on new connections."""
    headers = {"Cookie": f"semdup_review={cookie}", "X-CSRF-Token": csrf}
    page = ask("GET", base + "/review", at, headers=headers, follow_redirects=False)
    pair = {"index": index, "post_id": "1", "candidate_id": "2", "verdict": "duplicate"}
    verdict = ask("POST", base + "/review/api/verdicts", at, headers=headers, json=pair)
    return page.status_code, verdict.status_code


def test_a_replayed_cookie_after_logout_or_after_its_key_is_removed_is_refused(
    service: dict[str, Any], opensearch_url: str, redis_url: str, tiny_bundle: Path
) -> None:
    base, index, at = service["base"], service["index"], "127.0.0.33"
    client, cookie, csrf = _login(base, at, ALICE)
    assert _replay(base, at, cookie, csrf, index) == (200, 404)  # the session holds on both workers (no such pair)
    assert client.post("/review/logout", data={"csrf": csrf}).status_code == 303
    assert _replay(base, at, cookie, csrf, index) == (303, 401)  # to the login form; the verdict is refused
    client.close()

    _, kept, kept_csrf = _login(base, at, ALICE)
    _, gone, gone_csrf = _login(base, at, BOB)
    restart = {**service["env"], "SEMDUP_API_KEYS": keys(index, bob=False)}  # bob's key removed
    with semdup_serve(restart, service["root"] / "restarted.log", workers=2) as again:
        assert _replay(again, at, gone, gone_csrf, index) == (303, 401)
        assert _replay(again, at, kept, kept_csrf, index) == (200, 404)  # sessions outlive a restart


def test_x_forwarded_for_from_a_loopback_client_chooses_no_address(service: dict[str, Any]) -> None:
    """Issue #34: uvicorn trusted X-Forwarded-For from 127.0.0.1 by default, so a client there chose the address its
    wrong keys counted against: a new value per guess was never throttled, and naming another's address locked that
    one out. No proxy is named here: every request counts by its connection's address."""
    base, index, local, victim = service["base"], service["index"], "127.0.0.1", "127.0.0.67"
    similar, params = base + "/v1/similar", {"title": "visa", "index": index}

    def guesses(n: int, forwarded: Callable[[int], str], round_: str) -> list[int]:
        # a new key per guess (a key sent again counts against itself first, issue #45: not a guess of the address)
        return [
            ask(
                "GET", similar, local, f"guess-{round_}-{i:020d}", params=params,
                headers={"X-Forwarded-For": forwarded(i)},
            ).status_code
            for i in range(n)
        ]

    assert guesses(LIMIT, lambda _: victim, "a") == [401] * (LIMIT - 1) + [429]  # counted against the sender
    assert ask("GET", similar, victim, SEARCH, params=params).status_code == 200  # the victim is not locked out
    time.sleep(BLOCK_S + 0.5)  # the sender's own block ends
    statuses = guesses(12, lambda i: f"10.66.0.{i}", "b")  # the repro: a new address with each guess
    assert statuses[: LIMIT + 1] == [401] * (LIMIT - 1) + [429, 429], statuses


def test_behind_a_real_nginx_the_throttle_counts_the_address_the_proxy_names(
    service: dict[str, Any], opensearch_url: str, redis_url: str, tiny_bundle: Path
) -> None:
    """The operator names the proxy (SEMDUP_FORWARDED_ALLOW_IPS=127.0.0.1, nginx's address here): each client
    behind it is counted by the address nginx appends to X-Forwarded-For, whatever the client put there itself."""
    env = env_for(opensearch_url, redis_url, tiny_bundle, service["index"], SEMDUP_FORWARDED_ALLOW_IPS="127.0.0.1")
    root = service["root"] / "behind-nginx"
    root.mkdir()
    with semdup_serve(env, root / "serve.log", workers=2) as upstream, nginx_in_front(upstream, root / "ng") as base:
        similar, params = base + "/v1/similar", {"title": "visa", "index": service["index"]}
        guesser, other = "127.0.0.71", "127.0.0.72"
        statuses = [
            ask(
                "GET", similar, guesser, f"guess-{i:020d}", params=params, headers={"X-Forwarded-For": f"10.66.0.{i}"}
            ).status_code
            for i in range(12)
        ]
        assert statuses[: LIMIT + 1] == [401] * (LIMIT - 1) + [429, 429], statuses
        # Another client behind the same proxy is not slowed: the count is not the proxy's own address's.
        assert ask("GET", similar, other, SEARCH, params=params).status_code == 200
        spoofed = ask("GET", similar, other, SEARCH, params=params, headers={"X-Forwarded-For": guesser})
        assert spoofed.status_code == 200  # naming the blocked client's address does not make one blocked


SHORT = {"SEMDUP_SESSION_IDLE": "60", "SEMDUP_SESSION_MAX_AGE": "120"}


def _age(client: Any, cookie: str, seconds: int, idle_too: bool = True) -> None:
    """Make the session of ``cookie`` ``seconds`` older in the store (made, and unless ``idle_too`` is False last
    used, that long ago; ``expires`` as the store computes it): time passing, without waiting for it."""
    from semdup.index_format.system_indices import SESSIONS

    doc_id = hashlib.sha256(cookie.encode("ascii")).hexdigest()
    src = client.get(index=SESSIONS.name, id=doc_id)["_source"]
    doc = {"created": src["created"] - seconds, "seen": src["seen"] - seconds if idle_too else src["seen"]}
    if "max_age" in src:  # (sessions made before issue #34 had neither lifetimes nor expires)
        doc["expires"] = min(doc["created"] + src["max_age"], doc["seen"] + src["idle"])
    client.update(index=SESSIONS.name, id=doc_id, body={"doc": doc}, refresh=True)


def test_two_services_on_one_cluster_never_end_each_others_sessions(
    service: dict[str, Any], opensearch_client: Any, opensearch_url: str, redis_url: str, tiny_bundle: Path
) -> None:
    """Issue #34: a login at a service with short lifetimes purged another's sessions, a logout there without a
    CSRF token deleted one it does not own, and a session lasted as long as the reading service's lifetimes."""
    base, index, at = service["base"], service["index"], "127.0.0.81"
    other_secret = "another-services-secret-" + "y" * 24
    short = env_for(opensearch_url, redis_url, tiny_bundle, index, SEMDUP_SESSION_SECRET=other_secret, **SHORT)
    root = service["root"] / "two-services"
    root.mkdir()
    mine, cookie, csrf = _login(base, at, ALICE)  # 30 minutes unused, 8 hours at most
    _age(opensearch_client, cookie, 100)  # made and last used 100 s ago: live here, "expired" by 60 s lifetimes
    with semdup_serve(short, root / "short.log") as other:
        _login(other, at, BOB)[0].close()  # its login purges its own expired sessions only
        assert _replay(base, at, cookie, csrf, index) == (200, 404)  # still live where it was made
        foreign = ask("POST", other + "/review/logout", at, headers={"Cookie": f"semdup_review={cookie}"})
        assert foreign.status_code == 303  # to its login form, like any logout without a session of its own
        assert _replay(base, at, cookie, csrf, index) == (200, 404)  # not ended by a service that does not own it
        assert _replay(other, at, cookie, csrf, index) == (303, 401)  # nor read there
        bob, brief, brief_csrf = _login(other, at, BOB)  # 120 s at most
        bob.close()
        _age(opensearch_client, brief, 121, idle_too=False)
    again = {**short, "SEMDUP_SESSION_IDLE": "1800", "SEMDUP_SESSION_MAX_AGE": "28800"}
    with semdup_serve(again, root / "longer.log") as restarted:  # the same secret, longer lifetimes
        assert _replay(restarted, at, brief, brief_csrf, index) == (303, 401)  # by the 120 s it was made with
    mine.close()


def test_while_opensearch_is_down_a_caller_without_a_key_learns_only_that_it_is_unavailable(
    served: tuple[Bundle, str], opensearch_url: str, redis_url: str, tiny_bundle: Path, tmp_path: Path
) -> None:
    """Issue #34: the 503 bodies of /readyz, of GET /review with a cookie of the right length and of the login named
    the cluster's host and port and the index paths. The log has them; the caller gets "unavailable"."""
    dead = any_free_port()  # nothing listens there
    env = env_for(f"http://127.0.0.1:{dead}", redis_url, tiny_bundle, served[1])
    at = "127.0.0.91"
    with semdup_serve(env, tmp_path / "serve.log") as base:
        ready = ask("GET", base + "/readyz", at, allow_503=True)
        page = ask("GET", base + "/review", at, allow_503=True, headers={"Cookie": f"semdup_review={'a' * 43}"})
        with browser(at, base_url=base) as login_page:
            token = re.search(r'name="csrf" value="([^"]+)"', login_page.get("/review/login").text).group(1)
            login = login_page.post("/review/login", data={"key": ALICE, "csrf": token})
    for r in (ready, page, login):
        assert r.status_code == 503, (r.request.url, r.text)
        assert "unavailable" in r.text and "127.0.0.1" not in r.text and str(dead) not in r.text, r.text
        assert "semdup-sessions" not in r.text and "_doc" not in r.text, r.text
    assert ready.json()["reason"].startswith("OpenSearch is unavailable")
    assert page.json()["error"] == login.json()["error"]
    assert page.json()["error"]["type"] == "OpenSearchUnavailable"
    assert f"port={dead}" in (tmp_path / "serve.log").read_text()  # the detail is in the service's log


def test_metrics_and_openapi_need_the_ops_scope(service: dict[str, Any]) -> None:
    base, at = service["base"], "127.0.0.44"
    for path in ("/metrics", "/openapi.json"):
        assert ask("GET", base + path, at).status_code == 401
        assert ask("GET", base + path, at, SEARCH).status_code == 403
        assert ask("GET", base + path, at, OPS).status_code == 200
        assert ask("GET", base + path, at, headers={"Authorization": f"Bearer {OPS}"}).status_code == 200
    assert ask("GET", base + "/docs", at).status_code == 404 and ask("GET", base + "/redoc", at).status_code == 404
    assert ask("GET", base + "/healthz", at).status_code == 200 and ask("GET", base + "/readyz", at).status_code == 200


def test_the_smaller_findings(service: dict[str, Any]) -> None:
    base, at = service["base"], "127.0.0.55"
    bad = {
        "zero-width title": {"id": "keys-zw", "title": "\u200b\u200b\u200b"},
        "code-only body": {"id": "keys-code", "body": "<pre><code>print(1)</code></pre>"},
        "bidi override in the id": {"id": "keys-\u202egnp.exe", "title": "Visa for Qatar?"},
        "an id of only zero-width characters": {"id": "\u200b\u200c\u200d", "title": "Visa for Qatar?"},
    }
    for what, post in bad.items():
        r = ask("POST", base + "/v1/posts", at, INGEST, json={"posts": [post]})
        assert r.status_code == 422, (what, r.text)
    r = ask("POST", base + "/v1/posts?index=other", at, INGEST, json={"posts": [{"id": "keys-q", "title": "Visa?"}]})
    assert r.status_code == 422 and "unknown query parameter 'index'" in r.json()["error"]["message"], r.text
    client, _, _ = _login(base, at, ALICE)
    pair = {"index": service["index"], "post_id": "1", "candidate_id": "2", "verdict": "duplicate"}
    r = client.post("/review/api/verdicts", json=pair)  # no CSRF token: the message is whole, not "token: ***"
    assert r.status_code == 403 and "CSRF token: send the page's token" in r.text, r.text
    client.close()


def test_a_short_key_stops_the_service_at_start_with_one_line_naming_its_label(tiny_bundle: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEMDUP_")}
    cases = (
        (f"{SEARCH}:questions,Zq8sh0rt:questions:review:alice", "'alice'"),
        (f"{SEARCH}:questions,Zq8sh0rt:questions", "entry 2 of SEMDUP_API_KEYS"),
    )
    for api_keys, label in cases:
        run_env = {**env, "SEMDUP_API_KEYS": api_keys, "SEMDUP_OPENSEARCH_URL": "http://127.0.0.1:9"}
        out = subprocess.run(
            [sys.executable, "-m", "semdup", "serve", "--bundle", str(tiny_bundle), "--index", "questions"]
            + ["--port", str(any_free_port()), "--workers", "2"],
            env=run_env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
        assert out.returncode == 1 and len(lines) == 1, out.stderr
        assert lines[0].startswith("Error: API key ") and label in lines[0] and "24 characters" in lines[0]
        assert "Zq8sh0rt" not in lines[0]
