"""``semdup upgrade`` against a real OpenSearch: a site's connected index moves from model A to model B while a
reader reranks and a writer writes through the site's alias, and an interrupted upgrade resumes.

The copy runs in the test's process (as the command does), so no worker is needed: the site's index is filled
with model A in-process too (``sync_batch``, what a worker's ``sync_posts`` runs).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from indexer_stack import all_docs, travel_bundle_dir
from indexer_stack import travel_posts as _travel_posts

from semdup.core.posts import Post

pytestmark = [pytest.mark.opensearch, pytest.mark.slow]

N_SITE = 200
N_QUERIES = 10


@pytest.fixture(scope="module")
def travel_posts() -> list[Post]:
    return [p for p in _travel_posts() if p.title.strip() and p.body.strip()]


@pytest.fixture(scope="module")
def bundle_a(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from semdup.bundle.bundle import Bundle

    return Bundle.load(travel_bundle_dir(tmp_path_factory))


@pytest.fixture(scope="module")
def bundle_b(tmp_path_factory: pytest.TempPathFactory, travel_posts: list[Post]) -> Any:
    """Another model: the same architecture with another seed and width, so its version and dimension differ."""
    torch = pytest.importorskip("torch")
    from semdup.bundle.bundle import Bundle
    from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary
    from semdup.export.onnx_export import export_checkpoint
    from semdup.training.checkpoint import save_checkpoint
    from semdup.training.registry import get_arch

    torch.manual_seed(1)
    base = TextPipeline(TextPipelineSettings())
    pipeline = TextPipeline(TextPipelineSettings(), Vocabulary.build(base.text_tokens(p) for p in travel_posts))
    hparams = {"word_vectors": "none", "conv_units": 24, "emb_dim": 16}
    model = get_arch("bow-cnn").model_class.from_hparams(hparams, pipeline)
    root = tmp_path_factory.mktemp("upgrade-bundle-b")
    save_checkpoint(root / "ckpt", model, "bow-cnn", pipeline)
    out = export_checkpoint(root / "ckpt", root / "bundle", parity_posts=travel_posts[:16]).bundle_dir
    return Bundle.load(Path(out))


@pytest.fixture
def site(opensearch_client: Any, unique_index: str) -> Any:
    yield unique_index
    opensearch_client.indices.delete(index=f"{unique_index}*", ignore_unavailable=True, request_timeout=30)


def _doc(p: Post) -> dict[str, Any]:
    return {"Title": p.title, "Body": p.body, "Tags": ["travel"]}


def _make_connected_site(client: Any, alias: str, posts: list[Post], bundle: Any) -> str:
    """Two site indices behind ``alias``, connected by ``enable`` and filled with ``bundle``: its companion."""
    from opensearchpy.helpers import bulk

    from semdup.index_format.companion import companion_for
    from semdup.indexer.sync import sync_batch
    from semdup.ingest.reconcile import plan_sync
    from semdup.site_index.enable import enable_index

    mapping = {"properties": {"Title": {"type": "text"}, "Body": {"type": "text"}, "Tags": {"type": "keyword"}}}
    half = len(posts) // 2
    for part, chunk in (("-old", posts[:half]), ("-new", posts[half:])):
        client.indices.create(index=alias + part, body={"mappings": mapping})
        bulk(client, ({"_index": alias + part, "_id": p.id, "_source": _doc(p)} for p in chunk))
    client.indices.put_alias(index=alias + "-old", name=alias, body={"is_write_index": False})
    client.indices.put_alias(index=alias + "-new", name=alias, body={"is_write_index": True})
    client.indices.refresh(index=alias)
    out = enable_index(
        client, alias, version=bundle.version, dimension=bundle.dimension, title_field="Title", body_field="Body"
    )
    companion, source = companion_for(client, alias, bundle.version)
    ids = plan_sync(client, alias, bundle.version).ids
    assert len(ids) == len(posts)
    assert sync_batch(client, companion, source, ids, bundle).written == len(posts)
    client.indices.refresh(index=companion)
    return out.index


class _Reader(threading.Thread):
    """Reranks the site's alias in a loop with one long-lived Reranker (as `semdup serve` does)."""

    def __init__(self, reranker: Any, site: str, queries: list[Post]) -> None:
        super().__init__(daemon=True)
        self.rr, self.site, self.queries = reranker, site, queries
        self.answered = self.nonempty = 0
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            try:
                got = self.rr.rank(self.queries[n % len(self.queries)], k=10, index=self.site)
            except Exception as exc:  # noqa: BLE001 - every error is what the test counts
                self.errors.append(f"{type(exc).__name__}: {exc}")
            else:
                self.answered += 1
                self.nonempty += bool(got)
            n += 1


class _Writer(threading.Thread):
    """Adds posts through the site's alias, edits and deletes posts in their concrete index, recording for each
    write whether it saw the companion alias switched already."""

    def __init__(self, client: Any, site: str, alias: str, old: str, posts: list[Post], fresh: list[Post]) -> None:
        super().__init__(daemon=True)
        self.client, self.site, self.alias, self.old = client, site, alias, old
        self.posts, self.fresh = posts, fresh
        self.before: set[str] = set()  # ids written before the switch was seen
        self.after: set[str] = set()
        self.added: list[str] = []
        self.deleted: list[str] = []
        self.stop = threading.Event()

    def _switched(self) -> bool:
        return self.old not in self.client.indices.get_alias(name=self.alias)

    def run(self) -> None:
        n = 0
        while not self.stop.is_set() and n < len(self.fresh):
            seen = self._switched()
            op = n % 5
            if op == 4 and n // 5 < len(self.posts) // 2:  # delete an original post (first half: "-old")
                pid = self.posts[n // 5].id
                self.client.delete(index=self.site + "-old", id=pid)
                self.deleted.append(pid)
            elif op == 3:  # edit an original post of the second half ("-new") in place
                target = self.posts[-1 - n // 5]
                pid = target.id
                self.client.update(
                    index=self.site + "-new", id=pid, body={"doc": {"Title": f"edit {n} " + target.title}}
                )
            else:  # a new post through the site's alias (its write index)
                pid = self.fresh[n].id
                self.client.index(index=self.site, id=pid, body=_doc(self.fresh[n]))
                self.added.append(pid)
            (self.after if seen else self.before).add(pid)
            n += 1
            time.sleep(0.02)


def test_upgrade_under_reads_and_writes(
    opensearch_client: Any, site: str, bundle_a: Any, bundle_b: Any, travel_posts: list[Post]
) -> None:
    from semdup.index_format.companion import companion_alias, companion_for, companion_index_name, search_target
    from semdup.indexer.sync import sync_batch
    from semdup.ingest.reconcile import plan_sync
    from semdup.reranker.reranker import Reranker
    from semdup.reranker.settings import RerankerSettings
    from semdup.site_index.upgrade import remove_old, upgrade

    client = opensearch_client
    assert bundle_a.version != bundle_b.version and bundle_a.dimension != bundle_b.dimension
    posts = travel_posts[:N_SITE]
    queries = travel_posts[N_SITE : N_SITE + N_QUERIES]
    fresh = travel_posts[N_SITE + N_QUERIES : N_SITE + N_QUERIES + 2000]
    old = _make_connected_site(client, site, posts, bundle_a)
    alias, new = companion_alias(site), companion_index_name(site, bundle_b.version)
    assert old == companion_index_name(site, bundle_a.version)

    rr_a = Reranker(bundle_a, client, site, RerankerSettings(k_candidates=50))
    assert rr_a.rank(queries[0], k=10)  # resolved before the upgrade, kept by a running server
    reader = _Reader(rr_a, site, queries)
    writer = _Writer(client, site, alias, old, posts, fresh)
    reader.start()
    writer.start()
    time.sleep(1.0)  # both running before the upgrade starts
    started = time.monotonic()
    out = upgrade(client, site, bundle_b, progress=False, settle=1.5)  # settle > the site's 1 s refresh
    took = time.monotonic() - started
    time.sleep(1.0)  # and still running after the switch
    writer.stop.set()
    writer.join(30)
    reader.stop.set()
    reader.join(30)
    print(
        f"upgrade {took:.1f} s, {out.rounds} rounds, {out.written} written, {out.removed} removed; reader "
        f"{reader.answered} answered ({reader.nonempty} non-empty), {len(reader.errors)} errors; writer "
        f"{len(writer.before)} writes before the switch, {len(writer.after)} after"
    )

    assert out.switched and out.created and not out.already and out.new_index == new and out.old_indices == [old]
    assert out.from_version == bundle_a.version and not out.unencodable
    assert reader.errors == [] and reader.answered > 0 and reader.nonempty == reader.answered
    assert writer.before and writer.after  # the writer wrote on both sides of the switch

    # The alias moved; the old bundle's rerankers (the running one and a new one) still search the old companion.
    assert list(client.indices.get_alias(name=alias)) == [new]
    assert search_target(client, site, bundle_b.version) == new
    assert search_target(client, site, bundle_a.version) == old
    assert rr_a.target(site) == old
    rr_b = Reranker(bundle_b, client, site, RerankerSettings(k_candidates=50))
    assert rr_b.target(site) == new and rr_b.rank(queries[0], k=10)

    # Every post of the site is in the new companion, current, except writes made after the last catch-up.
    client.indices.refresh(index=site)
    site_ids = set(all_docs(client, site))
    assert len(site_ids) == N_SITE + len(writer.added) - len(writer.deleted)
    plan = plan_sync(client, site, bundle_b.version)
    assert set(plan.ids) <= writer.after, set(plan.ids) - writer.after
    # the final catch-up: what a worker on the new bundle does for `semdup backfill` / `semdup watch`
    target, source = companion_for(client, site, bundle_b.version)
    assert target == new
    if plan.ids:
        sync_batch(client, new, source, plan.ids, bundle_b)
        client.indices.refresh(index=new)
    assert plan_sync(client, site, bundle_b.version).ids == []
    assert set(all_docs(client, alias)) == site_ids

    # The old companion stays until --remove-old, which never deletes what the alias points at.
    assert client.indices.exists(index=old)
    listed = remove_old(client, site, dry_run=True)
    assert (listed.current, listed.deleted) == ([new], [old]) and client.indices.exists(index=old)
    assert remove_old(client, site).deleted == [old]
    assert not client.indices.exists(index=old) and client.indices.exists(index=new)
    assert remove_old(client, site).deleted == []
    assert upgrade(client, site, bundle_b, progress=False).already  # same model: nothing to do


class _Crashing:
    """The new bundle, but the cluster "goes away" on the ``fail_at``-th encoding call (nothing after it written)."""

    def __init__(self, bundle: Any, fail_at: int) -> None:
        self.bundle, self.fail_at, self.calls = bundle, fail_at, 0
        self.version, self.dimension = bundle.version, bundle.dimension

    def document_fields(self, posts: Any, *args: Any, **kw: Any) -> Any:
        self.calls += 1
        if self.calls >= self.fail_at:
            from opensearchpy.exceptions import ConnectionError as OsConnectionError

            from semdup.opensearch_io.boundary import client_error

            # what the client raises when the cluster refuses the connection (semdup's, by its transport)
            raise client_error(OsConnectionError("N/A", "connection refused (test)", None), "POST", "/_bulk")
        return self.bundle.document_fields(posts, *args, **kw)


def test_upgrade_resumes_and_refuses(
    opensearch_client: Any, site: str, bundle_a: Any, bundle_b: Any, travel_posts: list[Post]
) -> None:
    from semdup.core.errors import OpenSearchUnavailable, SearchIndexError
    from semdup.index_format.companion import companion_alias, companion_index_name
    from semdup.site_index.upgrade import upgrade

    client = opensearch_client
    with pytest.raises(SearchIndexError, match="not connected to semdup.*semdup enable"):
        upgrade(client, site, bundle_b, progress=False)
    posts = travel_posts[:N_SITE]
    old = _make_connected_site(client, site, posts, bundle_a)
    alias, new = companion_alias(site), companion_index_name(site, bundle_b.version)
    assert upgrade(client, site, bundle_a, progress=False).already  # its model already: nothing to do

    crashing = _Crashing(bundle_b, fail_at=3)  # two batches of 64 written, then the cluster "goes away"
    with pytest.raises(OpenSearchUnavailable, match="run the same command again: it resumes"):
        upgrade(client, site, crashing, progress=False, batch_size=64)
    client.indices.refresh(index=new)
    copied = client.count(index=new)["count"]
    assert 0 < copied < N_SITE
    assert list(client.indices.get_alias(name=alias)) == [old]  # not switched: searches still on the old one

    other = _Crashing(bundle_a, fail_at=1)
    other.version = "another-model"
    with pytest.raises(SearchIndexError, match="upgrade of .* to model .* is under way"):
        upgrade(client, site, other, progress=False)

    out = upgrade(client, site, bundle_b, progress=False, batch_size=64, max_rounds=1)
    assert out.switched and not out.created  # resumed the earlier run's companion ...
    assert out.written == N_SITE - copied  # ... encoding only what it lacked
    assert list(client.indices.get_alias(name=alias)) == [new]
    assert client.count(index=new)["count"] == N_SITE
    assert upgrade(client, site, bundle_b, progress=False).already
    # Back to the old model while its companion is kept: refused with what to do.
    with pytest.raises(SearchIndexError, match="kept from before an earlier upgrade.*remove-old"):
        upgrade(client, site, bundle_a, progress=False)
