"""sync_batch against a site that edits and deletes posts while they are being encoded (fakes: no cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from semdup.index_format.companion import SourceFields
from semdup.index_format.documents import content_hash
from semdup.indexer import sync
from semdup.indexer.batch_writer import BatchResult

SOURCE = SourceFields("site-posts", "Title", "Body")


class Site:
    """The site's posts as successive reads see them: ``reads[n]`` is what the n-th read returns (then the last)."""

    def __init__(self, *reads: dict[str, dict[str, str]]) -> None:
        self.reads = list(reads)
        self.n = 0

    def read(self, client: Any, source: SourceFields, ids: Any, concrete: Any = None) -> dict[str, dict[str, str]]:
        state = self.reads[min(self.n, len(self.reads) - 1)]
        self.n += 1
        return {i: state[i] for i in ids if i in state}


def _post(pid: str, title: str) -> dict[str, str]:
    return {"id": pid, "title": title, "body": "<p>body</p>"}


@pytest.fixture
def companion(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the companion ends up holding: id -> content hash, written by the faked index_batch / delete_batch."""
    held: dict[str, Any] = {}

    def index_batch(client: Any, index: str, posts: list[dict[str, str]], bundle: Any, search: Any = None):
        for p in posts:
            held[p["id"]] = content_hash(p["title"], p["body"])
        return BatchResult(written=len(posts))

    def delete_batch(client: Any, index: str, ids: list[str]) -> BatchResult:
        for i in ids:
            held.pop(i, None)
        return BatchResult(written=len(ids))

    monkeypatch.setattr(sync, "site_indices", lambda client, source: ["site-posts-2015", "site-posts-2016"])
    monkeypatch.setattr(sync, "index_batch", index_batch)
    monkeypatch.setattr(sync, "delete_batch", delete_batch)
    return held


def test_a_post_edited_while_encoding_is_encoded_again(monkeypatch, companion) -> None:
    before = {"1": _post("1", "Visa?"), "2": _post("2", "Trains?")}
    edited = {"1": _post("1", "Visa for Qatar?"), "2": _post("2", "Trains?")}
    monkeypatch.setattr(sync, "read_source_posts", Site(before, edited).read)
    out = sync.sync_batch(None, "site-posts.semdup", SOURCE, ["1", "2"], bundle=None)  # type: ignore[arg-type]
    assert companion == {pid: content_hash(p["title"], p["body"]) for pid, p in edited.items()}
    assert out.written == 2 and not out.missing and not out.failed


def test_a_post_deleted_while_encoding_leaves_nothing(monkeypatch, companion) -> None:
    before = {"1": _post("1", "Visa?"), "2": _post("2", "Trains?")}
    after = {"2": _post("2", "Trains?")}
    monkeypatch.setattr(sync, "read_source_posts", Site(before, after).read)
    out = sync.sync_batch(None, "site-posts.semdup", SOURCE, ["1", "2"], bundle=None)  # type: ignore[arg-type]
    assert set(companion) == {"2"} and out.missing == ["1"] and out.written == 1


def test_ids_the_site_no_longer_has_are_removed_and_a_post_that_keeps_changing_stops_after_the_rounds(
    monkeypatch, companion
) -> None:
    companion["9"] = "stale"  # deleted by the site before this sync
    reads = [{"1": _post("1", f"edit {n}")} for n in range(10)]
    site = Site(*reads)
    monkeypatch.setattr(sync, "read_source_posts", site.read)
    out = sync.sync_batch(None, "c", SOURCE, ["1", "9"], bundle=None, rounds=3)  # type: ignore[arg-type]
    assert "9" not in companion and out.missing == ["9"]
    assert site.n == 6  # three rounds of write + read again; `watch` finds what is left by its content hash
