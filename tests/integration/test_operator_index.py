"""semdup on an index the site made and keeps writing to, against a real OpenSearch, Redis and Celery worker.

The site's index is made the way a Q&A site would with plain opensearch-py: its own mapping (``Title``, ``Body`` as
HTML, ``Tags`` keyword, ``CreationDate``), numeric-looking ids, the default similarity, two indices behind the alias
the site reads and writes through. semdup connects it with ``enable`` (a companion index), fills it with a backfill
through the alias, and keeps it current by content hash while the site edits (a partial update and a full
re-index of a document), deletes and adds posts without calling semdup.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from indexer_stack import WAIT_S, all_docs
from indexer_stack import travel_posts as _travel_posts

from benchmarks.local_worker import LocalWorker
from benchmarks.site_index import SITE_MAPPING, make_site_alias, site_doc
from semdup.core.posts import Post

pytestmark = [pytest.mark.opensearch, pytest.mark.broker, pytest.mark.slow]

N_SITE = 240  # posts in the site's index (split over two indices behind its alias)
N_QUERIES = 20  # held-out posts used as rerank queries


@pytest.fixture(scope="module")
def travel_posts() -> list[Post]:
    return [p for p in _travel_posts() if p.title.strip() and p.body.strip()]


@pytest.fixture
def site(opensearch_client: Any, unique_index: str) -> Any:
    """The alias name; two concrete indices behind it; everything (companions included) deleted afterwards."""
    yield unique_index
    opensearch_client.indices.delete(index=f"{unique_index}*", ignore_unavailable=True, request_timeout=30)


def _wait(client: Any, job: Any) -> Any:
    from semdup.ingest.jobs import wait_for

    done = wait_for(client, job, timeout=WAIT_S, progress=False)
    assert done.finished, done
    return done


def _companion_docs(client: Any, alias: str) -> dict[str, dict[str, Any]]:
    return all_docs(client, f"{alias}.semdup")


def test_operator_index_enable_backfill_rerank_and_freshness(
    opensearch_client: Any, site: str, worker: LocalWorker, bundle: Any, travel_posts: list[Post]
) -> None:
    from semdup.core.errors import SearchIndexError
    from semdup.index_format.documents import content_hash
    from semdup.indexer.batch_writer import ensure_index_model, index_batch
    from semdup.ingest.backfill import enqueue_backfill, index_version
    from semdup.ingest.reconcile import plan_sync, watch
    from semdup.reranker.reranker import NothingIndexed, Reranker
    from semdup.reranker.settings import RerankerSettings
    from semdup.site_index.enable import enable_index

    client = opensearch_client
    posts, queries = travel_posts[:N_SITE], travel_posts[N_SITE : N_SITE + N_QUERIES]
    make_site_alias(client, site, posts)
    site_before = all_docs(client, site)
    mapping_before = client.indices.get_mapping(index=site)
    search = {"query": {"match": {"Body": "visa"}}, "size": 50}
    response_before = client.search(index=site, body=search)

    out = enable_index(
        client, site, version=bundle.version, dimension=bundle.dimension, title_field="Title", body_field="Body"
    )
    assert out.created and out.companion == f"{site}.semdup"
    assert index_version(client, site) == bundle.version  # `semdup backfill --index` needs no --bundle

    # Before the backfill: a rerank says why it has nothing, never a silent empty answer.
    rr = Reranker(bundle, client, site, RerankerSettings(k_candidates=50))
    assert rr.rank(queries[0], k=10) == []
    with pytest.raises(NothingIndexed, match=f"holds {N_SITE} posts but semdup has encoded none"):
        rr.empty_reason()
    # semdup never writes the site's documents: index-posts into the site's index is refused before any write.
    with pytest.raises(SearchIndexError, match="not created by semdup"):
        ensure_index_model(client, site, bundle.version)
    from semdup.ingest.jobs import ensure_index

    with pytest.raises(
        SearchIndexError, match="not created by semdup.*semdup enable"
    ):  # `semdup index-posts`, before enqueueing
        ensure_index(client, site, dimension=bundle.dimension)

    worker.start()
    done = _wait(client, enqueue_backfill(client, site, bundle.version, progress=False))  # through the alias
    assert (done.total, done.written, done.parked) == (N_SITE, N_SITE, 0)

    # The site's documents, mapping and search answers are exactly as before.
    assert all_docs(client, site) == site_before
    assert client.indices.get_mapping(index=site) == mapping_before
    response_after = client.search(index=site, body=search)
    assert response_after["hits"] == response_before["hits"]

    # Rerank on the site's alias equals rerank on an index semdup created with the same posts: same ids, same scores.
    own = f"{site}-own"
    from semdup.ingest.lexical_index import create_index

    create_index(client, own, dimension=bundle.dimension)
    site_posts = [Post(p.id, p.title, p.body) for p in posts]
    assert not index_batch(client, own, [p.to_json() for p in site_posts], bundle).failed
    client.indices.refresh(index=own)
    client.indices.refresh(index=f"{site}.semdup")
    ours = Reranker(bundle, client, own, RerankerSettings(k_candidates=50))
    compared = 0
    for q in queries:
        a, b = rr.rank(q, k=10), ours.rank(q, k=10)
        assert [c.id for c in a] == [c.id for c in b], q.id
        np.testing.assert_allclose([c.score for c in a], [c.score for c in b], atol=1e-6)
        compared += len(a)
    assert compared > N_QUERIES  # the comparison saw real candidates

    # The site edits, re-indexes, deletes and adds posts without calling semdup.
    edited, reindexed, deleted = posts[0], posts[-1], posts[1]
    new = travel_posts[N_SITE + N_QUERIES]
    client.update(index=site + "-2015", id=edited.id, body={"doc": {"Title": "Edited: " + queries[1].title}})
    full = site_doc(Post(reindexed.id, queries[2].title, queries[2].body), 7)
    client.index(index=site + "-2016", id=reindexed.id, body=full)  # a full re-index of the document
    client.delete(index=site + "-2015", id=deleted.id)
    client.index(index=site, id=new.id, body=site_doc(new, 3))  # through the alias's write index
    client.indices.refresh(index=site)

    plan = plan_sync(client, site, bundle.version)
    assert sorted(plan.stale) == sorted([edited.id, reindexed.id, new.id]) and plan.deleted == [deleted.id]
    rounds: list[Any] = []
    watch(client, site, bundle.version, rounds=1, on_round=rounds.append)  # what `semdup watch` runs every interval
    _wait(client, rounds[0])
    docs = _companion_docs(client, site)
    assert deleted.id not in docs and new.id in docs and len(docs) == N_SITE
    after = {
        edited.id: Post(edited.id, "Edited: " + queries[1].title, edited.body),
        reindexed.id: Post(reindexed.id, queries[2].title, queries[2].body),
        new.id: new,
    }
    expected = dict(zip(after, bundle.document_fields(list(after.values())), strict=True))
    from semdup.reranker.stored_fields import stored_semdup_fields

    for pid, post in after.items():
        semdup = docs[pid]["semdup"]
        assert semdup["content_hash"] == content_hash(post.title, post.body)
        got = stored_semdup_fields(semdup)["vector"]
        np.testing.assert_allclose(got, np.asarray(expected[pid]["vector"], dtype=np.float32), atol=1e-5)
    assert plan_sync(client, site, bundle.version).ids == []  # current: the next round enqueues nothing

    # Enabling again with --sparse makes every post stale until the backfill writes the new structure.
    from semdup.index_format.schema import CandidateFields

    again = enable_index(
        client,
        site,
        version=bundle.version,
        dimension=bundle.dimension,
        title_field="Title",
        body_field="Body",
        fields=CandidateFields(sparse=True),
    )
    assert not again.created and again.fields == CandidateFields(sparse=True)
    done = _wait(client, enqueue_backfill(client, site, bundle.version, progress=False))
    assert done.written == N_SITE
    docs = _companion_docs(client, site)
    assert all("terms" in d["semdup"] and d["semdup"]["structures"] == ["sparse"] for d in docs.values())
    assert all_docs(client, site) != site_before  # (the site's own edits) ...
    assert client.indices.get_mapping(index=site) == mapping_before  # ... but never semdup's fields

    # The site re-indexes a whole index with its own code and moves its alias: nothing of semdup's is lost or stale.
    client.indices.create(index=site + "-2015b", body={"mappings": SITE_MAPPING})
    client.reindex(body={"source": {"index": site + "-2015"}, "dest": {"index": site + "-2015b"}}, refresh=True)
    client.indices.update_aliases(
        body={
            "actions": [
                {"remove": {"index": site + "-2015", "alias": site}},
                {"add": {"index": site + "-2015b", "alias": site, "is_write_index": False}},
            ]
        }
    )
    client.indices.delete(index=site + "-2015")
    assert plan_sync(client, site, bundle.version).ids == []
    assert rr.rank(queries[3], k=10)  # and the reranker answers for the site's alias as before


def test_enable_refuses_what_it_cannot_serve(opensearch_client: Any, site: str, bundle: Any) -> None:
    from semdup.core.errors import SearchIndexError
    from semdup.ingest.lexical_index import create_index
    from semdup.site_index.enable import enable_index

    def enable(index: str, **kw: Any) -> Any:
        return enable_index(opensearch_client, index, version=bundle.version, dimension=bundle.dimension, **kw)

    with pytest.raises(SearchIndexError, match="does not exist"):
        enable(site)
    opensearch_client.indices.create(
        index=site, body={"mappings": {"_source": {"enabled": False}, "properties": {"title": {"type": "text"}}}}
    )
    with pytest.raises(SearchIndexError, match="does not keep _source"):
        enable(site)
    other = f"{site}-fields"
    opensearch_client.indices.create(index=other, body={"mappings": SITE_MAPPING})
    with pytest.raises(SearchIndexError, match="has no field 'title'.*--title-field"):
        enable(other)
    # A field named semdup in the site's own mapping is no obstacle: semdup never writes there.
    taken = f"{site}-taken"
    opensearch_client.indices.create(
        index=taken, body={"mappings": {"properties": {**SITE_MAPPING["properties"], "semdup": {"type": "text"}}}}
    )
    assert enable(taken, title_field="Title", body_field="Body").created
    from semdup.index_format.schema import CandidateFields

    with pytest.raises(SearchIndexError, match="created without k-NN"):
        enable(taken, title_field="Title", body_field="Body", fields=CandidateFields(knn=True))
    with pytest.raises(SearchIndexError, match="holds vectors of model .*semdup upgrade"):
        enable_index(
            opensearch_client, taken, version="other-model", dimension=4, title_field="Title", body_field="Body"
        )
    own = f"{site}-own"
    create_index(opensearch_client, own, dimension=bundle.dimension)
    with pytest.raises(SearchIndexError, match="created by semdup"):
        enable(own)


def test_duplicates_are_flagged_as_the_site_writes_them(
    opensearch_client: Any, opensearch_url: str, redis_url: str, site: str, bundle_dir: Path, bundle: Any,
    celery_app: Any, travel_posts: list[Post], tmp_path: Path,
) -> None:  # fmt: skip
    """A post the site writes that repeats an earlier one is flagged, with the site's ids, once the watch (or the
    site's sync call) has encoded it: the worker chains the flagging after the write (SEMDUP_FLAG_DUPLICATES=1)."""
    from indexer_stack import wait_until, worker_env

    from semdup.alerts.store import delete_flags, list_flags
    from semdup.ingest.backfill import enqueue_backfill
    from semdup.ingest.reconcile import enqueue_sync
    from semdup.reranker.calibration import Calibration, save_calibration
    from semdup.site_index.enable import enable_index

    client = opensearch_client
    posts = travel_posts[:60]
    original = posts[7]
    make_site_alias(client, site, posts)
    enable_index(
        client, site, version=bundle.version, dimension=bundle.dimension, title_field="Title", body_field="Body"
    )
    # The tiny bundle is untrained, so the test states its threshold: just under the top fused score, which a
    # verbatim copy reaches (as tests/integration/test_alerts_celery.py explains).
    top = bundle.fusion["beta_bow"] + bundle.fusion["beta_dense"] + bundle.fusion["alpha"] - 1e-3
    cal = save_calibration(
        tmp_path / "c.calibration.json", bundle.version, Calibration(a=50.0, b=-50.0 * top, threshold=top)
    )
    env = worker_env(opensearch_url, redis_url, bundle_dir, SEMDUP_FLAG_DUPLICATES="1", SEMDUP_CALIBRATION=str(cal))
    worker = LocalWorker(env, tmp_path / "worker.log")
    try:
        worker.start()
        _wait(client, enqueue_backfill(client, site, bundle.version, progress=False))
        copy_id = str(10**9 + 7)  # the site's next numeric id
        client.index(index=site, id=copy_id, body=site_doc(original, 0), refresh=True)  # a verbatim repeat
        _wait(client, enqueue_sync(client, site, bundle.version, progress=False))  # one `semdup watch` round

        def flagged() -> dict[str, Any]:
            return {f.candidate_id: f for f in list_flags(client, site, post_id=copy_id)}

        wait_until(lambda: original.id in flagged(), "the repeat's flag", timeout=WAIT_S)
        flag = flagged()[original.id]
        assert flag.index == site and flag.model == bundle.version and flag.score >= top
        assert flag.probability is not None and flag.probability > 0.5
    finally:
        worker.stop()
        delete_flags(client, site, [copy_id, *(p.id for p in posts)])
