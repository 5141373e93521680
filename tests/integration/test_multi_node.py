"""semdup on a cluster of three real nodes, one of them SIGKILLed (issue #41 item 3).

The cluster is the session's ``opensearch_cluster`` (tests/conftest.py): three embedded 2.19.1 nodes with k-NN and
ml-commons, each on its own ports and data folder. Every client here (the test's, a real ``semdup worker``, a real
``semdup serve``, ``semdup upgrade``) talks to the first node, :data:`ENTRY`; the node killed is always another
one, chosen as the holder of what the test wants lost (the verdicts' primary, the companion's primaries). The site's
indices have 3 shards and 1 replica, as a site's would on three data nodes.

* **Backfill through a node loss**: 2,000 Travel posts backfilled by a worker; a node SIGKILLed once half are
  written, started again on its own data and ports while the backfill runs. Every post is in the companion exactly
  once, holding its own text's encoding (a write in flight at the kill may be applied twice by OpenSearch's
  failover, the same document at ``_version`` 2: counted, not asserted), the ledger has one outcome per batch
  summing to 2,000, and every flag and verdict written before the kill is there, unchanged.
* **Search through a node loss**: ``/v1/rerank`` and the site's ``_search`` through semdup's search pipeline,
  asked in a loop while the node is down: each answer is 200, or 503 with ``Retry-After``, within 5 s; once the
  cluster is yellow (the node's shards failed over), only 200s.
* **Upgrade**: ``semdup upgrade`` on the cluster while reranks and searches run: zero errors.

Every wait is on the cluster's health or on a count, never a sleep. A test that kills a node starts it again and
waits for green before it ends: the next test finds the cluster whole.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from indexer_stack import travel_posts as _travel_posts
from indexer_stack import wait_until, worker_env
from review_stack import semdup_serve, serve_env

from benchmarks.local_worker import LocalWorker
from benchmarks.site_index import SITE_MAPPING, bulk_or_raise, site_doc
from semdup.core.posts import Post
from semdup.core.settings import OpenSearchSettings
from semdup.devstack.local_cluster import LocalCluster
from semdup.opensearch_io.clients import connect

pytestmark = [pytest.mark.multinode, pytest.mark.opensearch, pytest.mark.broker, pytest.mark.slow]

ENTRY = 0  # the member every client talks to; never the one killed
SHARDS, REPLICAS = 3, 1  # the site's indices, as a site's on three data nodes
N_BACKFILL = 2000
N_SITE = 300
KEY = "multinode-key-5e1a-4c2b-9f07-33d1"
BOUND_S = 5.0  # every answer within this while the node is down
DOWN_REQUESTS = 15  # answers each prober must get while the node is down and the cluster yellow
STEP_S = 300.0  # the longest any one wait below may take


@pytest.fixture(scope="module")
def client(opensearch_cluster: LocalCluster) -> Iterator[Any]:
    c = connect(OpenSearchSettings(url=opensearch_cluster.urls[ENTRY], timeout=60))
    yield c
    c.close()


@pytest.fixture(scope="module")
def posts() -> list[Post]:
    return [p for p in _travel_posts() if p.title.strip() and p.body.strip()]


@pytest.fixture
def site(client: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh site index name; it and its companions are deleted after the test."""
    name = f"semdup-test-mn-{request.node.name[5:25].replace('_', '-')}-{uuid.uuid4().hex[:6]}"
    yield name
    client.indices.delete(index=f"{name}*", ignore_unavailable=True, request_timeout=60)


def _make_site(client: Any, name: str, posts: list[Post]) -> None:
    """The site's own index: its mapping, 3 shards, 1 replica, ``posts`` in it, refreshed, every copy started."""
    settings = {"index": {"number_of_shards": SHARDS, "number_of_replicas": REPLICAS}}
    client.indices.create(index=name, body={"settings": settings, "mappings": SITE_MAPPING}, request_timeout=120)
    bulk_or_raise(client, [{"_index": name, "_id": p.id, "_source": site_doc(p, n)} for n, p in enumerate(posts)])
    client.indices.refresh(index=name)
    _green(client, name)


def _enable(client: Any, site: str, bundle: Any) -> str:
    from semdup.site_index.enable import enable_index

    out = enable_index(
        client, site, version=bundle.version, dimension=bundle.dimension, title_field="Title", body_field="Body"
    )
    return out.companion


def _fill(client: Any, site: str, bundle: Any, n: int) -> str:
    """The companion filled in this process (what a worker's ``sync_posts`` runs); its concrete name."""
    from semdup.index_format.companion import companion_for
    from semdup.indexer.sync import sync_batch
    from semdup.ingest.reconcile import plan_sync

    _enable(client, site, bundle)
    companion, source = companion_for(client, site, bundle.version)
    ids = plan_sync(client, site, bundle.version).ids
    assert len(ids) == n and sync_batch(client, companion, source, ids, bundle).written == n
    client.indices.refresh(index=companion)
    return companion


def _replicated(client: Any, *indices: str) -> None:
    """Every index semdup made here has a replica on this three-node cluster without anyone setting one (#41: the
    companion follows the site index's replicas, the stores expand to one), and every copy is started."""
    for name, got in client.indices.get_settings(index=",".join(indices)).items():
        index = got["settings"]["index"]
        assert int(index.get("number_of_replicas", 0)) >= 1, (name, index.get("auto_expand_replicas"))
    _green(client, *indices)


def _green(client: Any, *indices: str) -> None:
    health = client.cluster.health(index=",".join(indices), wait_for_status="green", timeout="240s",
                                   request_timeout=STEP_S)  # fmt: skip
    assert health["status"] == "green", health


def _member_holding(client: Any, cluster: LocalCluster, index: str, primary_first: bool = True) -> int:
    """The member other than :data:`ENTRY` that holds a primary of ``index`` (else a replica): the one to kill."""
    names = [n.name for n in cluster.plan()]
    rows = [r for r in client.cat.shards(index=index, format="json") if r.get("node") and r["node"] != names[ENTRY]]
    assert rows, f"no copy of {index} outside the entry node: {client.cat.shards(index=index, format='json')}"
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["node"]] = counts.get(r["node"], 0) + (10 if r["prirep"] == "p" and primary_first else 1)
    return names.index(max(sorted(counts), key=counts.__getitem__))


def _versions(client: Any, index: str) -> dict[str, int]:
    """Each document's ``_version``: 1 for a document written once."""
    from semdup.opensearch_io.boundary import scan

    client.indices.refresh(index=index)
    query = {"query": {"match_all": {}}, "version": True, "_source": False}
    return {h["_id"]: int(h["_version"]) for h in scan(client, index=index, query=query)}


def _hashes(client: Any, index: str) -> dict[str, str]:
    """Each document's ``semdup.content_hash``: the hash of the text its vectors encode."""
    from semdup.opensearch_io.boundary import scan

    client.indices.refresh(index=index)
    query = {"query": {"match_all": {}}, "_source": ["semdup.content_hash"]}
    return {h["_id"]: h["_source"]["semdup"]["content_hash"] for h in scan(client, index=index, query=query)}


@contextmanager
def _killed(cluster: LocalCluster, victim: int) -> Iterator[Callable[[], None]]:
    """SIGKILL member ``victim``; yields ``back()``, which starts it again (its data folder, its ports) and waits
    for all members and green. Run on the way out if the test did not, so the next test finds the cluster whole."""
    assert cluster.kill(victim) is not None, f"member {victim} was not running"
    done = False

    def back() -> None:
        nonlocal done
        if not done:
            done = True
            began = time.monotonic()
            cluster.start_node(victim, timeout=STEP_S)
            cluster.wait_for("green", nodes=cluster.size, timeout=STEP_S)
            print(f"{cluster.plan()[victim].name} started again: green {time.monotonic() - began:.1f} s later")

    try:
        yield back
    finally:
        back()


# --- backfill through a node loss ----------------------------------------------------------------------------
def test_a_backfill_through_a_node_loss_loses_no_post_and_keeps_every_verdict(
    opensearch_cluster: LocalCluster,
    client: Any,
    site: str,
    redis_url: str,
    celery_app: Any,
    bundle_dir: Path,
    bundle: Any,
    posts: list[Post],
    tmp_path: Path,
) -> None:
    from semdup.alerts.store import FLAGS_INDEX, Flag, list_flags, replace_flags
    from semdup.index_format.documents import content_hash
    from semdup.ingest.backfill import enqueue_backfill
    from semdup.ingest.jobs import wait_for
    from semdup.ingest.ledger import done_batches, ledger_entries
    from semdup.ingest.outcomes import JOBS_INDEX, ensure_jobs_index, read_job
    from semdup.review.verdicts import VERDICTS, VERDICTS_INDEX, iter_verdicts, record_verdict

    cluster = opensearch_cluster
    sent = posts[:N_BACKFILL]
    _make_site(client, site, sent)
    companion = _enable(client, site, bundle)

    # Moderators' work before the kill: 20 flags, a verdict on each.
    pairs = list(zip(sent[0:40:2], sent[1:40:2], strict=True))
    flags = [Flag(site, p.id, q.id, 0.9, 1.5, bundle.version, "2026-12-01T10:00:00+00:00") for p, q in pairs]
    replace_flags(client, site, [f.post_id for f in flags], flags)
    verdicts = [record_verdict(client, f, VERDICTS[i % 2], "moderator-a").verdict for i, f in enumerate(flags)]
    ensure_jobs_index(client)
    _replicated(client, companion, FLAGS_INDEX, VERDICTS_INDEX, JOBS_INDEX)
    victim = _member_holding(client, cluster, VERDICTS_INDEX)  # the verdicts' primary if not on the entry node

    # the service's default visibility timeout (300 s), not the 10 s of the worker-kill tests: no worker dies here
    env = worker_env(cluster.urls[ENTRY], redis_url, bundle_dir, SEMDUP_VISIBILITY_TIMEOUT="300")
    worker = LocalWorker(env, tmp_path / "worker.log")
    worker.start()
    try:
        job = enqueue_backfill(client, site, bundle.version, progress=False)
        assert job.total == N_BACKFILL

        def written() -> int:
            return int(client.count(index=companion)["count"])

        wait_until(lambda: written() >= N_BACKFILL // 2, "half the posts written", STEP_S, every=0.2)
        at_kill = written()
        with _killed(cluster, victim) as back:
            cluster.wait_for("yellow", nodes=cluster.size - 1, timeout=STEP_S)  # it left; its replicas took over
            # the backfill goes on while the node is down: one more batch at least (or all of it)
            wait_until(lambda: written() >= min(N_BACKFILL, at_kill + 64), "a batch written while the node is down",
                       STEP_S, every=0.2)  # fmt: skip
            during = written()
            back()
        done = wait_for(client, job, timeout=STEP_S, interval=0.5, progress=False)
    finally:
        worker.stop()
    print(f"killed {cluster.plan()[victim].name} at {at_kill} of {N_BACKFILL} written; {during} by its restart")

    # 0 lost, each post one document holding its own text's encoding
    assert done.finished and (done.total, done.written, done.parked) == (N_BACKFILL, N_BACKFILL, 0), done
    stored = _hashes(client, companion)
    assert stored == {p.id: content_hash(p.title, p.body) for p in sent}
    # A write in flight when its primary died is applied again by OpenSearch on the promoted replica (its bulk is
    # retried on the new primary): the same document, at `_version` 2. What semdup writes is idempotent, so that
    # changes nothing above; the count is printed, not asserted.
    again = sorted(i for i, v in _versions(client, companion).items() if v != 1)
    print(f"posts applied more than once by the failover: {len(again)} {again[:10]}")
    # the ledger is complete: one outcome per published batch, each batch run once, together every post
    recorded = read_job(client, job.id)
    finished = done_batches(client, [job.id])
    assert len(finished) == recorded.batches and set(ledger_entries(client, jobs=[job.id])) <= finished
    outcomes = _versions_of_outcomes(client, job.id)
    assert len(outcomes) == recorded.batches > 1 and sum(w for w, _ in outcomes.values()) == N_BACKFILL
    # A batch's outcome may be recorded twice (same document, same figures): a write that the node's loss left
    # unacknowledged is sent again, and OpenSearch re-applies a replicated write on the promoted replica. One
    # outcome per batch, the figures summing to the posts, says none is counted twice.
    twice = {b: v for b, (_, v) in outcomes.items() if v != 1}
    print(f"batch outcomes recorded more than once: {twice or 'none'}")
    # every flag and verdict from before the kill, unchanged
    assert sorted(list_flags(client, site), key=_pair) == sorted(flags, key=_pair)
    assert sorted(iter_verdicts(client, site), key=_pair) == sorted(verdicts, key=_pair)


def _pair(x: Any) -> tuple[str, str]:
    return (x.post_id, x.candidate_id)


def _versions_of_outcomes(client: Any, job_id: str) -> dict[str, tuple[int, int]]:
    """Each batch's outcome record: (posts written, the record's ``_version``: 1 when the batch ran once)."""
    from semdup.ingest.outcomes import JOBS_INDEX
    from semdup.opensearch_io.boundary import scan

    client.indices.refresh(index=JOBS_INDEX)
    query = {"query": {"bool": {"filter": [{"term": {"job": job_id}}, {"term": {"kind": "outcome"}}]}},
             "version": True}  # fmt: skip
    return {h["_source"]["batch"]: (int(h["_source"]["written"]), int(h["_version"]))
            for h in scan(client, index=JOBS_INDEX, query=query)}  # fmt: skip


# --- search through a node loss ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Answer:
    started: float
    took: float
    status: int
    retry_after: str | None
    error: str = ""


class _Prober(threading.Thread):
    """Asks one request in a loop and records every answer (or the error in place of one)."""

    def __init__(self, ask: Any) -> None:
        super().__init__(daemon=True)
        self.ask = ask
        self.answers: list[Answer] = []
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        with httpx.Client(timeout=30) as http:
            while not self.stop.is_set():
                t0 = time.monotonic()
                try:
                    r = self.ask(http, n)
                    self.answers.append(Answer(t0, time.monotonic() - t0, r.status_code, r.headers.get("Retry-After"),
                                               "" if r.status_code == 200 else r.text[:300]))  # fmt: skip
                except httpx.HTTPError as exc:
                    self.answers.append(Answer(t0, time.monotonic() - t0, 0, None, f"{type(exc).__name__}: {exc}"))
                n += 1

    def after(self, t: float) -> list[Answer]:
        return [a for a in self.answers if a.started >= t]


def _stop(probers: list[_Prober]) -> None:
    for p in probers:
        p.stop.set()
    for p in probers:
        p.join(60)


def _site_search(post: Post) -> dict[str, Any]:
    return {"size": 10, "_source": False, "query": {"bool": {
        "should": [{"match": {"Title": post.title}}, {"match": {"Body": post.body}}],
        "must_not": [{"ids": {"values": [post.id]}}]}}}  # fmt: skip


def _pipeline(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SEMDUP_API_KEY=KEY, SEMDUP_OPENSEARCH_URL=url)
    return subprocess.run([sys.executable, "-m", "semdup", "pipeline", *args], env=env, capture_output=True,
                          text=True, timeout=STEP_S, check=False)  # fmt: skip


def test_rerank_and_the_sites_search_answer_through_a_node_loss(
    opensearch_cluster: LocalCluster, client: Any, site: str, bundle_dir: Path, bundle: Any, posts: list[Post],
    tmp_path: Path,
) -> None:  # fmt: skip
    cluster = opensearch_cluster
    entry = cluster.urls[ENTRY]
    _make_site(client, site, posts[:N_SITE])
    companion = _fill(client, site, bundle, N_SITE)
    _replicated(client, companion)
    queries = posts[N_SITE : N_SITE + 20]
    with semdup_serve(serve_env(entry, bundle_dir, site, f"{KEY}:{site}"), tmp_path / "serve.log") as service:
        create = ("create", "--index", site, "--service-url", service, "--default", "--timeout", "5", "--json")
        # ml-commons' first deploy on a cluster can time out on every node reading the connectors' master key, and
        # a deploy sent again meets the first one still running: `create` sends it again itself until it is deployed
        made = _pipeline(*create, url=entry)
        assert made.returncode == 0, made.stdout + made.stderr

        def rerank(http: httpx.Client, n: int) -> httpx.Response:
            q = queries[n % len(queries)]
            return http.post(f"{service}/v1/rerank", headers={"X-API-Key": KEY},
                             json={"title": q.title, "body": q.body, "k": 10, "index": site})  # fmt: skip

        def search(http: httpx.Client, n: int) -> httpx.Response:
            return http.post(f"{entry}/{site}/_search", json=_site_search(queries[n % len(queries)]))

        with httpx.Client(timeout=30) as http:  # warm, and semdup is in the site's search
            ranked = [c["id"] for c in rerank(http, 0).json()["candidates"]]
            assert ranked and [h["_id"] for h in search(http, 0).json()["hits"]["hits"]] == ranked
        probers = [_Prober(rerank), _Prober(search)]
        for p in probers:
            p.start()
        try:
            wait_until(lambda: all(len(p.answers) >= 3 for p in probers), "answers before the kill", STEP_S, 0.1)
            victim = _member_holding(client, cluster, companion)
            killed_at = time.monotonic()
            with _killed(cluster, victim):
                cluster.wait_for("yellow", nodes=cluster.size - 1, timeout=STEP_S)
                yellow_at = time.monotonic()
                wait_until(lambda: all(len(p.after(yellow_at)) >= DOWN_REQUESTS for p in probers),
                           "answers while the node is down", STEP_S, 0.1)  # fmt: skip
                _stop(probers)  # before the node comes back: what is checked is the time it was down
        finally:
            _stop(probers)
        with httpx.Client(timeout=30) as http:  # whole again: semdup still ranks the site's search
            ranked = [c["id"] for c in rerank(http, 1).json()["candidates"]]
            assert [h["_id"] for h in search(http, 1).json()["hits"]["hits"]] == ranked
        assert _pipeline("remove", "--index", site, url=entry).returncode == 0

    for name, p in zip(("/v1/rerank", "_search"), probers, strict=True):
        down = [a for a in p.answers if a.started >= killed_at]
        print(f"{name}: {len(p.answers)} answers, {len(down)} after the kill, {len(p.after(yellow_at))} once yellow "
              f"({yellow_at - killed_at:.2f} s after it); statuses {sorted({a.status for a in down})}; slowest "
              f"{max(a.took for a in down):.2f} s")  # fmt: skip
        bad = [a for a in down if not (a.status == 200 or (a.status == 503 and a.retry_after))]
        assert bad == [], (name, bad[:3])
        assert [a for a in down if a.took > BOUND_S] == [], name
        assert [a for a in p.after(yellow_at) if a.status != 200] == [], name


# --- upgrade on the cluster ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bundle_b(tmp_path_factory: pytest.TempPathFactory, posts: list[Post]) -> Path:
    """Another model: the same architecture with another seed and width (another version and dimension)."""
    torch = pytest.importorskip("torch")
    from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary
    from semdup.export.onnx_export import export_checkpoint
    from semdup.training.checkpoint import save_checkpoint
    from semdup.training.registry import get_arch

    torch.manual_seed(2)
    base = TextPipeline(TextPipelineSettings())
    pipeline = TextPipeline(TextPipelineSettings(), Vocabulary.build(base.text_tokens(p) for p in posts))
    model = get_arch("bow-cnn").model_class.from_hparams({"word_vectors": "none", "conv_units": 24, "emb_dim": 16},
                                                         pipeline)  # fmt: skip
    root = tmp_path_factory.mktemp("mn-bundle-b")
    save_checkpoint(root / "ckpt", model, "bow-cnn", pipeline)
    return Path(export_checkpoint(root / "ckpt", root / "bundle", parity_posts=posts[:16]).bundle_dir)


class _Reader(threading.Thread):
    """Reranks with one long-lived Reranker (as `semdup serve` does) and runs the site's search, in a loop."""

    def __init__(self, reranker: Any, client: Any, site: str, queries: list[Post]) -> None:
        super().__init__(daemon=True)
        self.rr, self.client, self.site, self.queries = reranker, client, site, queries
        self.answered = 0
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            q = self.queries[n % len(self.queries)]
            try:
                self.rr.rank(q, k=10, index=self.site)
                self.client.search(index=self.site, body=_site_search(q))
            except Exception as exc:  # noqa: BLE001 - every error is what the test counts
                self.errors.append(f"{type(exc).__name__}: {exc}")
            else:
                self.answered += 1
            n += 1


def test_upgrade_on_the_cluster_with_queries_running(
    opensearch_cluster: LocalCluster, client: Any, site: str, bundle: Any, bundle_b: Path, posts: list[Post]
) -> None:
    from semdup.bundle.bundle import Bundle
    from semdup.index_format.companion import companion_alias, companion_index_name
    from semdup.reranker.reranker import Reranker
    from semdup.reranker.settings import RerankerSettings

    entry = opensearch_cluster.urls[ENTRY]
    _make_site(client, site, posts[:N_SITE])
    old = _fill(client, site, bundle, N_SITE)
    _replicated(client, old)
    new_version = Bundle.load(bundle_b).version
    reader = _Reader(Reranker(bundle, client, site, RerankerSettings(k_candidates=50)), client, site,
                     posts[N_SITE : N_SITE + 10])  # fmt: skip
    reader.start()
    try:
        wait_until(lambda: reader.answered >= 3 or bool(reader.errors), "reads before the upgrade", STEP_S, 0.1)
        env = dict(os.environ, SEMDUP_OPENSEARCH_URL=entry)
        cmd = [sys.executable, "-m", "semdup", "upgrade", "--alias", site, "--bundle", str(bundle_b)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=STEP_S * 2, check=False)
        during = reader.answered
        wait_until(lambda: reader.answered >= during + 3 or bool(reader.errors), "reads after it", STEP_S, 0.1)
    finally:
        reader.stop.set()
        reader.join(60)
    print(f"upgrade: {done.stdout.strip()}; reader {reader.answered} answered, {len(reader.errors)} errors")
    assert done.returncode == 0 and "created" in done.stdout, done.stdout + done.stderr
    assert reader.errors == [] and reader.answered > 6
    new = companion_index_name(site, new_version)
    assert list(client.indices.get_alias(name=companion_alias(site))) == [new]
    client.indices.refresh(index=new)
    assert client.count(index=new)["count"] == N_SITE
    _green(client, new)  # the new companion's every copy started on the cluster
