"""semdup on a cluster with the security plugin, as its least-privilege users (issue #41, item 4), on real parts.

The node: OpenSearch 2.19.1 with k-NN, ml-commons and the security plugin (:mod:`semdup.devstack.secured_opensearch`),
TLS on HTTP and transport with a CA the fixture makes, no internal user but the ones made here. The administrator
(the admin certificate) applies what ``semdup roles print`` writes and makes three users, one per role; then every
step runs as the user an operator would run it as, through the CLI and real processes:

* setup: ``semdup enable``; worker: a real ``semdup worker`` (flagging on), ``semdup backfill``; service: a real
  ``semdup serve``, ``/v1/rerank``, a review verdict; setup again: ``semdup pipeline create`` (ml-commons) and a site
  user's ``_search`` through the pipeline;
* each role is refused outside its patterns, and the CLI says so in one ``Error:`` line;
* a wrong password: one ``Error:`` line naming the user; no password in any output or log;
* TLS: the CA the cluster uses works (every step above), another CA fails naming ``SEMDUP_OPENSEARCH_CA_CERTS``.
"""

from __future__ import annotations

import ast
import json
import os
import re
import secrets
import shutil
import ssl
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from indexer_stack import configure_celery, travel_bundle_dir, wait_until, worker_env
from indexer_stack import travel_posts as _travel_posts
from review_stack import semdup_serve, serve_env

from benchmarks.local_worker import LocalWorker
from benchmarks.site_index import make_site_index
from semdup.devstack.local_process import any_free_port
from semdup.devstack.secured_opensearch import SecuredOpenSearch, make_certificates

pytestmark = [pytest.mark.opensearch, pytest.mark.broker, pytest.mark.slow, pytest.mark.secured]

N_SITE = 60
WAIT_S = 300.0
RERANK_KEY = "secured-rerank-" + secrets.token_hex(8)
REVIEW_KEY = "secured-review-" + secrets.token_hex(8)
PASSWORDS = {role: f"Sd-{secrets.token_urlsafe(12)}-9a!" for role in ("service", "worker", "setup", "site")}


@dataclass
class Cluster:
    """The secured node, its site index, the index no semdup role may read, and an admin client for checks."""

    node: SecuredOpenSearch
    url: str
    ca: Path
    site: str
    private: str
    admin: Any
    logs: Path

    def login(self, role: str) -> dict[str, str]:
        """Only the ``SEMDUP_OPENSEARCH_*`` variables of :meth:`env` (for the worker's and service's helpers)."""
        return {k: v for k, v in self.env(role).items() if k.startswith("SEMDUP_OPENSEARCH")}

    def env(self, role: str, **extra: str) -> dict[str, str]:
        """A process's environment as ``semdup-<role>``: the URL, its user and password, the cluster's CA."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SEMDUP_OPENSEARCH")}
        env.update(
            SEMDUP_OPENSEARCH_URL=self.url,
            SEMDUP_OPENSEARCH_USERNAME=f"semdup-{role}",
            SEMDUP_OPENSEARCH_PASSWORD=PASSWORDS[role],
            SEMDUP_OPENSEARCH_CA_CERTS=str(self.ca),
            SEMDUP_OPENSEARCH_MAX_RETRIES="0",
            OMP_NUM_THREADS="1",
        )
        env.update(extra)
        return env


def _admin_client(url: str, node: SecuredOpenSearch) -> Any:
    """The administrator's client: the admin certificate (test code only; semdup's users log in with passwords)."""
    from opensearchpy import OpenSearch

    from semdup.opensearch_io.boundary import MappedTransport

    certs = node.certificates
    return OpenSearch(hosts=[url], use_ssl=True, verify_certs=True, ca_certs=str(certs.ca),
                      client_cert=str(certs.admin), client_key=str(certs.admin_key), transport_class=MappedTransport,
                      timeout=120)  # fmt: skip


def semdup_cli(env: dict[str, str], *args: str, log: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "semdup", *args], env=env, capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip
    if log is not None:
        with log.open("a", encoding="utf-8") as out:
            out.write(f"$ semdup {' '.join(args)}\n{done.stdout}{done.stderr}")
    return done


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one ``Error:`` line a failed command printed (and nothing that looks like a traceback)."""
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("Error:")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The secured node (768 MB heap), the roles of ``semdup roles print`` applied, one user per role."""
    state = Path(tempfile.mkdtemp(prefix="semdup-test-secured-"))
    heap = os.environ.get("SEMDUP_TEST_SECURED_HEAP", "768m")
    node = SecuredOpenSearch(state_dir=state, port=any_free_port(), heap=heap)
    logs = tmp_path_factory.mktemp("secured-logs")
    try:
        url = node.start(timeout=400)
        admin = _admin_client(url, node)
        suffix = uuid.uuid4().hex[:8]
        site, private = f"site-{suffix}", f"private-{suffix}"
        printed = semdup_cli(dict(os.environ), "roles", "print", "--index", site)
        assert printed.returncode == 0, printed.stderr
        for name, body in json.loads(printed.stdout).items():
            node.api("PUT", f"/_plugins/_security/api/roles/{name}", body)
        for role in PASSWORDS:
            user = f"semdup-{role}"
            node.api("PUT", f"/_plugins/_security/api/internalusers/{user}", {"password": PASSWORDS[role]})
            mapped = "semdup_site_search" if role == "site" else f"semdup_{role}"
            node.api("PUT", f"/_plugins/_security/api/rolesmapping/{mapped}", {"users": [user]})
        posts = _site_posts()
        make_site_index(admin, site, posts)
        make_site_index(admin, private, posts[:5])
        yield Cluster(node, url, node.certificates.ca, site, private, admin, logs)
    finally:
        node.stop()
        node_logs = [f.read_text(errors="replace") for f in (node.log_file, state / "console.log") if f.exists()]
        leaked = [pw for pw in PASSWORDS.values() if any(pw in text for text in node_logs)]
        shutil.rmtree(state, ignore_errors=True)
        assert not leaked, f"{len(leaked)} password(s) in the OpenSearch node's logs"


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return travel_bundle_dir(tmp_path_factory)


def _calibration(bundle_dir: Path, path: Path) -> Path:
    """A threshold below every score: each post is flagged against its top candidate (a verdict needs a flag)."""
    from semdup.bundle import Bundle
    from semdup.reranker.calibration import Calibration, save_calibration

    save_calibration(path, Bundle.load(bundle_dir).version, Calibration(a=1.0, b=0.0, threshold=-1e9))
    return path


def flagging_covered(worker_log: str) -> int:
    """How many posts the worker's finished flagging tasks took (their results in its log, each task once): counting
    the tasks it received instead would stop early while a chained task still waits in the broker. A task that raised
    counts as covering every post, so the wait ends and the assertion after it says what failed."""
    lines = [ln for ln in worker_log.splitlines() if "flag_duplicates[" in ln]
    if any(" raised " in ln for ln in lines):
        return 1 << 30
    done: dict[str, dict[str, int]] = {}
    for ln in lines:
        if " succeeded in " in ln:
            task_id = ln.split("[", 1)[1].split("]", 1)[0]
            done[task_id] = ast.literal_eval(ln.split(" succeeded in ", 1)[1].split(": ", 1)[1])
    return sum(d["posts"] + d["missing"] + d["failed"] for d in done.values())


def flagged(c: Cluster, post_id: str | None = None) -> int:
    """The flags stored for the site's posts (or one post's)."""
    c.admin.indices.refresh(index="semdup-duplicates", ignore_unavailable=True)
    terms = [{"term": {"index": c.site}}] + ([{"term": {"post_id": post_id}}] if post_id else [])
    query = {"query": {"bool": {"filter": terms}}}
    return int(c.admin.count(index="semdup-duplicates", body=query, ignore_unavailable=True)["count"])


def _site_posts() -> list[Any]:
    """The posts of the site index (the fixture's): Travel posts with a title and a body."""
    return [p for p in _travel_posts() if p.title.strip() and p.body.strip()][:N_SITE]


def test_the_whole_flow_runs_as_the_least_privilege_users(
    cluster: Cluster, redis_url: str, bundle_dir: Path, tmp_path: Path
) -> None:
    c, log = cluster, cluster.logs / "cli.log"
    enabled = semdup_cli(c.env("setup"), "enable", "--index", c.site, "--bundle", str(bundle_dir),
                         "--title-field", "Title", "--body-field", "Body", log=log)  # fmt: skip
    assert enabled.returncode == 0, enabled.stderr

    configure_celery(redis_url)
    cal = _calibration(bundle_dir, tmp_path / "flags.calibration.json")
    wenv = worker_env(c.url, redis_url, bundle_dir, **c.login("worker"), SEMDUP_FLAG_DUPLICATES="1",
                      SEMDUP_CALIBRATION=str(cal), SEMDUP_FLAG_K="1")  # fmt: skip
    worker = LocalWorker(wenv, c.logs / "worker.log")
    worker.start()
    try:
        backfill = ("backfill", "--index", c.site, "--batch-size", "16", "--timeout", str(WAIT_S))  # 4 flagging tasks
        filled = semdup_cli({**c.env("worker"), "SEMDUP_BROKER_URL": redis_url}, *backfill, log=log)
        assert filled.returncode == 0, filled.stderr
        companion = f"{c.site}.semdup"
        c.admin.indices.refresh(index=companion)
        assert c.admin.count(index=companion)["count"] == N_SITE
        wait_until(lambda: flagging_covered(worker.text()) >= N_SITE, "the worker's flagging tasks", WAIT_S)

        # How many posts those tasks flagged depends on which batches a refresh had shown them. One edited post,
        # synced after the refresh above, sees the other 59: with a threshold below every score it gets its flag.
        edited = _site_posts()[0]
        c.admin.update(index=c.site, id=edited.id, body={"doc": {"Title": edited.title + " (edited)"}}, refresh=True)
        synced = semdup_cli({**c.env("worker"), "SEMDUP_BROKER_URL": redis_url}, *backfill, log=log)
        assert synced.returncode == 0, synced.stderr
        wait_until(lambda: flagging_covered(worker.text()) >= N_SITE + 1, "the edited post's flagging", WAIT_S)
        assert " raised " not in worker.text() and not re.search(r"'failed': [1-9]", worker.text())
        assert flagged(c, post_id=edited.id) == 1 and flagged(c) >= 1
    finally:
        worker.stop()

    keys = f"{RERANK_KEY}:{c.site},{REVIEW_KEY}:{c.site}:review:carol"
    senv = serve_env(c.url, bundle_dir, c.site, keys, **c.login("service"))
    with semdup_serve(senv, c.logs / "serve.log") as service:
        post = _travel_posts()[N_SITE + 3]
        r = httpx.post(f"{service}/v1/rerank", headers={"X-API-Key": RERANK_KEY}, timeout=60,
                       json={"title": post.title, "body": post.body, "k": 5, "index": c.site})  # fmt: skip
        assert r.status_code == 200, r.text
        assert len(r.json()["candidates"]) == 5

        hit = c.admin.search(index="semdup-duplicates", body={"size": 1, "query": {"term": {"index": c.site}}})
        flag = hit["hits"]["hits"][0]["_source"]
        body = {"index": c.site, "verdict": "duplicate"} | {k: flag[k] for k in ("post_id", "candidate_id")}
        r = httpx.post(f"{service}/review/api/verdicts", headers={"X-API-Key": REVIEW_KEY}, json=body, timeout=60)
        assert r.status_code == 200, r.text
        c.admin.indices.refresh(index="semdup-verdicts")
        assert c.admin.count(index="semdup-verdicts", body={"query": {"term": {"index": c.site}}})["count"] == 1

        made = semdup_cli({**c.env("setup"), "SEMDUP_API_KEY": RERANK_KEY}, "pipeline", "create", "--index", c.site,
                          "--service-url", service, "--default", "--timeout", "20", "--json", log=log)  # fmt: skip
        assert made.returncode == 0, made.stderr
        assert json.loads(made.stdout)["model_state"] == "DEPLOYED"

        site_user = c.env("site")  # the site's own search, through its index's default pipeline
        query = {"size": 5, "_source": False, "query": {"bool": {"should": [
            {"match": {"Title": post.title}}, {"match": {"Body": post.body}}]}}}  # fmt: skip
        auth = (site_user["SEMDUP_OPENSEARCH_USERNAME"], PASSWORDS["site"])
        tls = ssl.create_default_context(cafile=str(c.ca))
        r = httpx.post(f"{c.url}/{c.site}/_search", json=query, auth=auth, verify=tls, timeout=60)
        assert r.status_code == 200, r.text
        ids = [h["_id"] for h in r.json()["hits"]["hits"]]
        reranked = httpx.post(f"{service}/v1/rerank", headers={"X-API-Key": RERANK_KEY}, timeout=60,
                              json={"title": post.title, "body": post.body, "k": 5, "index": c.site})  # fmt: skip
        assert ids == [x["id"] for x in reranked.json()["candidates"]]  # semdup ranked the site's own search

        removed = semdup_cli(c.env("setup"), "pipeline", "remove", "--index", c.site, "--json", log=log)
        assert removed.returncode == 0, removed.stderr

    for name in ("cli.log", "worker.log", "serve.log"):
        text = (c.logs / name).read_text(errors="replace")
        for pw in PASSWORDS.values():
            assert pw not in text, f"a password in {name}"


@pytest.mark.parametrize(
    "role, args",
    [
        ("service", ("rerank", "--index", "{private}", "--title", "visa", "--body", "qatar", "--bundle", "{bundle}")),
        ("worker", ("backfill", "--index", "{private}", "--bundle", "{bundle}", "--no-wait")),
        ("setup", ("enable", "--index", "{private}", "--bundle", "{bundle}", "--title-field", "Title",
                   "--body-field", "Body")),
    ],
    ids=["service", "worker", "setup"],
)
def test_each_role_is_refused_outside_its_patterns(
    cluster: Cluster, bundle_dir: Path, redis_url: str, role: str, args: tuple[str, ...]
) -> None:
    done = semdup_cli({**cluster.env(role), "SEMDUP_BROKER_URL": redis_url},
                      *(a.format(private=cluster.private, bundle=bundle_dir) for a in args))  # fmt: skip
    line = error_line(done)
    assert "403" in line and f"semdup-{role}" in line and cluster.private in line, line
    assert PASSWORDS[role] not in done.stdout + done.stderr


def test_a_wrong_password_is_one_error_line_naming_the_user(cluster: Cluster) -> None:
    wrong = "Wr0ng-" + secrets.token_urlsafe(10)
    env = cluster.env("worker", SEMDUP_OPENSEARCH_PASSWORD=wrong)
    done = semdup_cli(env, "backfill", "--index", cluster.site, "--no-wait")
    line = error_line(done)
    assert "semdup-worker" in line and "SEMDUP_OPENSEARCH_PASSWORD" in line, line
    assert wrong not in done.stdout + done.stderr and PASSWORDS["worker"] not in done.stdout + done.stderr


def test_another_ca_fails_naming_the_ca_setting(cluster: Cluster, tmp_path: Path) -> None:
    other = make_certificates(tmp_path / "other-ca", name="not-the-cluster-ca")
    done = semdup_cli(cluster.env("worker", SEMDUP_OPENSEARCH_CA_CERTS=str(other.ca)), "backfill", "--index",
                      cluster.site, "--no-wait")  # fmt: skip
    line = error_line(done)
    assert "SEMDUP_OPENSEARCH_CA_CERTS" in line and "certificate verify failed" in line.lower(), line
