"""``index_batch`` with its three overlapping stages (prepare the next chunk, encode this one, write the previous
one): what is written, and in which order, is what the straightforward code writes, whatever the chunking, the
streams or the device's chunk size; a post the encoder refuses fails alone."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tiny_onnx import WORDS, tiny_wordpiece_bundle

from semdup.bundle.bundle import Bundle
from semdup.core.errors import PostError
from semdup.core.posts import Post
from semdup.index_format.documents import lexical_document
from semdup.index_format.packed_fields import unpack_semdup_fields
from semdup.index_format.schema import CandidateFields
from semdup.indexer import batch_writer
from semdup.opensearch_io.bulk import BulkReport

SEARCH = CandidateFields(sparse=False, knn=True)


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_wordpiece_bundle(tmp_path_factory.mktemp("pipeline") / "tiny")


def _payloads(n: int) -> list[dict[str, str]]:
    rng = np.random.default_rng(7)
    out = []
    for i in range(n):
        title = " ".join(rng.choice(WORDS, size=int(rng.integers(0, 5))))
        body = "<p>" + " ".join(rng.choice(WORDS, size=int(rng.integers(1, 40)))) + "</p>"
        out.append({"id": f"p{i}", "title": title, "body": body})
    out.append({"id": "p3", "title": "visa again", "body": "the same id twice: the later one must win"})
    return out


class Recorder:
    """Stands in for ``bulk_write``: keeps each request's actions and the thread that sent it."""

    def __init__(self) -> None:
        self.requests: list[list[dict[str, Any]]] = []
        self.threads: set[str] = set()

    def __call__(self, client: Any, actions: list[dict[str, Any]], **_: Any) -> BulkReport:
        self.threads.add(threading.current_thread().name)
        self.requests.append(list(actions))
        return BulkReport(written=len(actions))


def _written(monkeypatch: pytest.MonkeyPatch, bundle: Any, payloads: list[dict[str, Any]], **kw: Any) -> Recorder:
    recorder = Recorder()
    monkeypatch.setattr(batch_writer, "bulk_write", recorder)
    result = batch_writer.index_batch(None, "idx", payloads, bundle, search=SEARCH, **kw)  # type: ignore[arg-type]
    assert not result.failed and result.written == len(payloads)
    return recorder


def _reference(bundle: Bundle, payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The straightforward code: every post encoded alone, its document built in the batch's order."""
    out = []
    for obj in payloads:
        post = Post.from_json(obj)
        fields = bundle.document_fields([post])[0]
        source = lexical_document(post)
        source["semdup"] = batch_writer._semdup_fields(post, fields, SEARCH)
        out.append({"_op_type": "index", "_index": "idx", "_id": post.id, "_source": source})
    return out


def _same_documents(got: list[dict[str, Any]], want: list[dict[str, Any]], names: list[str]) -> None:
    assert [a["_id"] for a in got] == [a["_id"] for a in want]
    for a, b in zip(got, want, strict=True):
        sa, sb = dict(a["_source"]), dict(b["_source"])
        da, db = sa.pop("semdup"), sb.pop("semdup")
        assert sa == sb  # the lexical fields, exactly
        np.testing.assert_allclose(da.pop("vector"), db.pop("vector"), rtol=0, atol=1e-6)
        va, ta = unpack_semdup_fields(da.pop("packed"), names)
        vb, tb = unpack_semdup_fields(db.pop("packed"), names)
        np.testing.assert_allclose(va, vb, rtol=0, atol=1e-6)
        assert dict(ta) == dict(tb)
        assert da == db  # model, content hash, structures


@pytest.mark.parametrize("streams,chunk", [(1, None), (2, None), (2, 7), (3, 1000)])
def test_what_is_written_and_its_order_do_not_change(
    bundle_dir: Path, monkeypatch: pytest.MonkeyPatch, streams: int, chunk: int | None
) -> None:
    bundle = Bundle.load(bundle_dir, streams=streams)
    payloads = _payloads(90)
    recorder = _written(monkeypatch, bundle, payloads, chunk_size=chunk)
    got = [a for request in recorder.requests for a in request]
    _same_documents(got, _reference(Bundle.load(bundle_dir), payloads), bundle.feature_names())
    size = chunk or batch_writer.chunk_size_for(len(payloads), "cpu", True)
    assert [len(r) for r in recorder.requests] == [min(size, len(payloads) - i) for i in range(0, len(payloads), size)]
    assert all(name.startswith("semdup-bulk") for name in recorder.threads)


def test_chunks_by_device_and_encoder(bundle_dir: Path) -> None:
    """A transformer on CPU encodes a task as one length-sorted pool up to the maximum, the CNN family in 32-post
    chunks, a GPU in GPU-sized ones."""
    size = batch_writer.chunk_size_for
    assert size(64, "cpu", True) == 64 and size(100, "cpu", True) == 100 and size(10, "cpu", True) == 32
    assert size(1000, "cpu", True) == batch_writer.CPU_CHUNK_MAX
    assert size(64) == size(1000) == batch_writer.INDEX_CHUNK
    assert size(1000, "cuda") == size(64, "cuda", True) == batch_writer.GPU_INDEX_CHUNK
    assert Bundle.load(bundle_dir).sorts_by_length


class Refusing:
    """A bundle whose ``prepare_documents`` refuses a chunk holding post ``bad``, as a real bundle's checks do."""

    version = "refusing-1"

    def __init__(self, real: Bundle) -> None:
        self.real = real
        self.prepared_on: set[str] = set()

    def prepare_documents(self, posts: list[Post]) -> Any:
        self.prepared_on.add(threading.current_thread().name)
        if any(p.id == "bad" for p in posts):
            raise PostError("post 'bad': refused by the encoder")
        return self.real.prepare_documents(posts)

    def encode_prepared(self, prepared: Any, batch_size: int | None = None, arrays: bool = False) -> Any:
        return self.real.encode_prepared(prepared, batch_size, arrays)

    def document_fields(self, posts: list[Post]) -> list[dict[str, Any]]:
        if any(p.id == "bad" for p in posts):
            raise PostError("post 'bad': refused by the encoder")
        return self.real.document_fields(posts)


def test_a_post_the_encoder_refuses_fails_alone_and_the_rest_keep_their_order(
    bundle_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = Refusing(Bundle.load(bundle_dir))
    payloads = _payloads(20)
    payloads.insert(5, {"id": "bad", "title": "visa", "body": "usb"})
    recorder = Recorder()
    monkeypatch.setattr(batch_writer, "bulk_write", recorder)
    result = batch_writer.index_batch(
        None, "idx", payloads, bundle, search=SEARCH, chunk_size=8  # type: ignore[arg-type]
    )
    assert [f.id for f in result.failed] == ["bad"] and result.payloads["bad"]["body"] == "usb"
    written = [a["_id"] for request in recorder.requests for a in request]
    assert written == [p["id"] for p in payloads if p["id"] != "bad"]
    assert all(name.startswith("semdup-prepare") for name in bundle.prepared_on)
