"""The indexer's rewritten hot paths write exactly what the straightforward code wrote.

* ``Bundle.document_fields`` tokenises each post once for the dense input and the term weights: it must equal
  the reference (``build_inputs`` per batch for the vector, ``TextPipeline.term_frequencies`` for the terms).
* ``bulk_lines`` serialises with orjson: the JSON must parse to the same values the stdlib writes, and the float32
  vector and term weights (``semdup_source``) must come back as the same float32 values.
* ``write_overlapped`` writes every chunk, in order, and waits for the request in flight before it raises.

Real posts (AskUbuntu test pairs: HTML, code, URLs) and a tiny bundle exported here; the trained Travel bundle too
when ``artifacts/bundles/bow-cnn-travel`` exists. No timings are asserted.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from semdup.bundle.bundle import Bundle
from semdup.core.inputs import build_inputs
from semdup.core.posts import Post
from semdup.export.parity import sample_posts
from semdup.index_format.mapping import semdup_source
from semdup.index_format.packed_fields import unpack_semdup_fields
from semdup.index_format.schema import CandidateFields, feature_name
from semdup.indexer import batch_writer
from semdup.opensearch_io.boundary import ItemFailure
from semdup.opensearch_io.bulk import BulkReport, bulk_lines

TRAVEL_BUNDLE = Path(__file__).resolve().parents[3] / "artifacts" / "bundles" / "bow-cnn-travel"


@pytest.fixture(scope="module")
def posts() -> list[Post]:
    return sample_posts(80)


@pytest.fixture(scope="module")
def tiny_bundle(posts: list[Post], tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    torch = pytest.importorskip("torch")
    from tiny_models import tiny_checkpoint  # tests/ is on sys.path (pytest.ini_options.pythonpath)

    from semdup.export.onnx_export import export_checkpoint

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("speed-bundle")
    ckpt = tiny_checkpoint("bow-cnn", posts, root / "ckpt")
    return Bundle.load(export_checkpoint(ckpt, root / "bow-cnn", archive=False, parity_posts=posts[:4]).bundle_dir)


def _reference_fields(bundle: Bundle, posts: list[Post], batch_size: int) -> list[dict[str, Any]]:
    """document_fields as first written: the text pipeline run once for the vector and once for the terms."""
    chunks = [
        bundle.run_encoder(build_inputs(bundle.input_kind, bundle.pipeline, posts[i : i + batch_size]))
        for i in range(0, len(posts), batch_size)
    ]
    x = np.concatenate(chunks)
    dense = (x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)).astype(np.float32)
    t = bundle.term_weights.astype(np.float64)
    tiny = float(np.finfo(np.float32).tiny)
    out = []
    for i, p in enumerate(posts):
        tf = bundle.pipeline.term_frequencies(bundle.pipeline.text_tokens(p))
        terms: dict[str, float] = {}
        term_ids: list[int] = []
        if tf:
            ids = np.fromiter(tf.keys(), dtype=np.int64, count=len(tf))
            v = np.fromiter(tf.values(), dtype=np.float64, count=len(tf)) * t[ids]
            norm = float(np.sqrt(np.sum(v * v)))
            if norm > 0:
                v = v / norm
                itos = bundle.pipeline.vocab.itos
                pairs = zip(ids.tolist(), v.tolist(), strict=True)
                kept = [(k, w) for k, w in pairs if w > tiny]
                terms = {feature_name(itos[k]): float(w) for k, w in kept}
                term_ids = [k for k, _ in kept]
        out.append({"vector": dense[i].tolist(), "terms": terms, "term_ids": term_ids, "model": bundle.version})
    return out


def _bundles(tiny_bundle: Bundle) -> list[Bundle]:
    return [tiny_bundle] + ([Bundle.load(TRAVEL_BUNDLE, intra_op_threads=1)] if TRAVEL_BUNDLE.is_dir() else [])


@pytest.mark.parametrize("batch_size", [64, 7])
def test_document_fields_equal_the_two_pass_reference(tiny_bundle: Bundle, posts: list[Post], batch_size: int) -> None:
    for bundle in _bundles(tiny_bundle):
        got = bundle.document_fields(posts, batch_size=batch_size)
        want = _reference_fields(bundle, posts, batch_size)
        # bit-equal vectors, same term keys, values and order: both run the same batches through the same session
        # and the same float ops after it, so equality holds on any CPU (it is the claim, not an accident)
        assert got == want
        assert [list(d["terms"]) for d in got] == [list(d["terms"]) for d in want]


def test_encode_dense_and_terms_equal_document_fields(tiny_bundle: Bundle, posts: list[Post]) -> None:
    for bundle in _bundles(tiny_bundle):
        fields = bundle.document_fields(posts)
        assert bundle.encode_terms(posts) == [f["terms"] for f in fields]
        assert bundle.encode_dense(posts).tolist() == [f["vector"] for f in fields]  # one path (_dense): bit-equal


def test_negative_term_weights_are_still_left_out(tiny_bundle: Bundle, posts: list[Post]) -> None:
    bundle = tiny_bundle
    saved = bundle.term_weights
    try:
        bundle.term_weights = saved.copy()
        bundle.term_weights[bundle.term_weights > np.median(bundle.term_weights)] *= -1.0
        assert bundle.document_fields(posts[:20]) == _reference_fields(bundle, posts[:20], 64)
    finally:
        bundle.term_weights = saved


def test_bulk_lines_parse_to_what_the_stdlib_writes(tiny_bundle: Bundle, posts: list[Post]) -> None:
    fields = tiny_bundle.document_fields(posts[:10])
    for post, f in zip(posts[:10], fields, strict=True):
        semdup = semdup_source(f, CandidateFields(sparse=True, knn=True))  # every float written as text
        source = {"post_id": post.id, "title": post.title, "body": post.body, "semdup": semdup}
        head, body = bulk_lines({"_op_type": "index", "_index": "i", "_id": post.id, "_source": source})
        assert json.loads(head) == {"index": {"_index": "i", "_id": post.id}}
        parsed = json.loads(body)
        vector = parsed["semdup"].pop("vector")
        assert np.array_equal(np.asarray(vector, dtype=np.float32), np.asarray(f["vector"], dtype=np.float32))
        np.testing.assert_allclose(vector, f["vector"], atol=1e-7, rtol=0)
        terms = parsed["semdup"].pop("terms")
        assert list(terms) == list(f["terms"])
        assert [np.float32(w) for w in terms.values()] == [np.float32(w) for w in f["terms"].values()]
        assert all(abs(terms[k] - w) < 1e-7 for k, w in f["terms"].items())
        packed_vector, packed_terms = unpack_semdup_fields(parsed["semdup"].pop("packed"), tiny_bundle.feature_names())
        assert np.array_equal(packed_vector, np.asarray(f["vector"], dtype=np.float32))
        assert {k: np.float32(w) for k, w in packed_terms.items()} == {k: np.float32(w) for k, w in terms.items()}
        reference = json.loads(json.dumps({**source, "semdup": {"model": f["model"]}}))
        assert parsed == reference


def test_bulk_lines_keep_deletes_and_updates() -> None:
    head, body = bulk_lines({"_op_type": "delete", "_index": "i", "_id": "7"})
    assert json.loads(head) == {"delete": {"_index": "i", "_id": "7"}} and body is None
    head, body = bulk_lines({"_op_type": "update", "_index": "i", "_id": "7", "script": {"params": {"x": 0.5}}})
    assert json.loads(head) == {"update": {"_index": "i", "_id": "7"}} and json.loads(body) == {
        "script": {"params": {"x": 0.5}}
    }


def test_bulk_lines_leave_what_orjson_cannot_write_to_the_client() -> None:
    _, body = bulk_lines({"_index": "i", "_id": "1", "_source": {1: "integer key"}})
    assert body == {1: "integer key"}


def test_write_overlapped_writes_every_chunk_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[list[str]] = []
    threads: set[str] = set()

    def fake_bulk_write(client: Any, actions: list[dict[str, Any]], **_: Any) -> BulkReport:
        threads.add(threading.current_thread().name)
        written.append([a["_id"] for a in actions])
        failed = [ItemFailure(a["_id"], 400, "x", "refused") for a in actions if a["_id"] == "bad"]
        return BulkReport(written=len(actions), failed=failed)

    monkeypatch.setattr(batch_writer, "bulk_write", fake_bulk_write)
    chunks = [[{"_id": "1"}, {"_id": "2"}], [], [{"_id": "bad"}], [{"_id": "4"}]]
    report = batch_writer.write_overlapped(None, iter(chunks))  # type: ignore[arg-type]
    assert written == [["1", "2"], ["bad"], ["4"]]
    assert report.written == 4 and report.failed == [ItemFailure("bad", 400, "x", "refused")]
    assert all(name.startswith("semdup-bulk") for name in threads)


def test_write_overlapped_raises_a_request_error_after_the_request_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    from semdup.core.errors import OpenSearchUnavailable

    calls: list[str] = []

    def failing_bulk_write(client: Any, actions: list[dict[str, Any]], **_: Any) -> BulkReport:
        calls.append(actions[0]["_id"])
        raise OpenSearchUnavailable("down")

    def chunks():
        yield [{"_id": "1"}]
        yield [{"_id": "2"}]
        yield [{"_id": "3"}]

    monkeypatch.setattr(batch_writer, "bulk_write", failing_bulk_write)
    with pytest.raises(OpenSearchUnavailable, match="down"):
        batch_writer.write_overlapped(None, chunks())  # type: ignore[arg-type]
    assert calls == ["1"]
