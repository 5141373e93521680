"""``semdup.packed``: the exact vector and term weights the reranker reads from the candidate search's own hits.

Unit tests check the codec and the fast paths (orjson client serializer, docvalue fields on every candidate
path) against the plain ones; integration tests check, on a real OpenSearch with real posts and an exported
bundle, that what comes back equals the offline model's output bit for bit, that indices and documents written
before ``semdup.packed`` existed keep working (``_source`` fallback, field cache, ``ensure_index_model`` and
``semdup enable`` adding the field), and that both paths rank alike.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from tiny_models import tiny_checkpoint  # tests/ is on sys.path (pytest.ini_options.pythonpath)

from semdup.bundle.bundle import Bundle
from semdup.opensearch_io.boundary import orjson_serializer
from semdup.core.posts import Post
from semdup.export.onnx_export import export_checkpoint
from semdup.export.parity import sample_posts
from semdup.index_format.documents import lexical_document
from semdup.index_format.mapping import semdup_source
from semdup.index_format.packed_fields import pack_semdup_fields, unpack_semdup_fields
from semdup.index_format.schema import HNSW_PARAMETERS, CandidateFields, index_body
from semdup.indexer.batch_writer import ensure_index_model, index_batch
from semdup.ingest.lexical_index import create_index
from semdup.reranker import Reranker, RerankerSettings
from semdup.reranker.sources import SourceQuery, TemplateSource, knn_query, sparse_query
from semdup.reranker.stored_fields import DOCVALUE_FIELDS, stored_semdup_fields
from semdup.search_templates.components import COMPONENTS_SCRIPT_ID, components_params, script_fields
from semdup.search_templates import register_templates, render_template, template_body, template_id, template_params

TOLERANCE = 1e-5


# --- codec ---------------------------------------------------------------------------------------------------
def test_pack_round_trips_float32_exactly() -> None:
    rng = np.random.default_rng(0)
    vector = rng.standard_normal(400).astype(np.float32)
    terms = {"visa": 0.61, "naïve": 1e-30, "12\u00b704": 0.25, "": 0.5, "東京": 3.0}
    got_vector, got_terms = unpack_semdup_fields(pack_semdup_fields(vector, terms))
    assert got_vector is not None and got_vector.dtype == np.float32 and np.array_equal(got_vector, vector)
    assert list(got_terms) == list(terms)
    assert all(np.float32(got_terms[k]) == np.float32(w) for k, w in terms.items())


def test_pack_without_vector_or_terms_and_unpadded_base64() -> None:
    assert unpack_semdup_fields(pack_semdup_fields(None, {"a": 0.5})) == (None, {"a": 0.5})
    vector, terms = unpack_semdup_fields(pack_semdup_fields([0.6, 0.8], {}))
    assert terms == {} and vector is not None and vector.tolist() == [np.float32(0.6), np.float32(0.8)]
    packed = pack_semdup_fields([1.0, 2.0, 3.0], {"ab": 1.0})
    assert unpack_semdup_fields(packed.rstrip("="))[1] == {"ab": 1.0}  # doc values come back without padding


def test_pack_refuses_what_it_cannot_write_and_unpack_refuses_garbage() -> None:
    with pytest.raises(ValueError, match="newline"):
        pack_semdup_fields([1.0], {"a\nb": 1.0})
    with pytest.raises(ValueError, match="not a packed"):
        unpack_semdup_fields("!!!")
    with pytest.raises(ValueError, match="format version 9"):
        unpack_semdup_fields("CQAAAAAAAAAA")  # version byte 9
    truncated = pack_semdup_fields([1.0, 2.0], {"a": 1.0})[:8]
    with pytest.raises(ValueError):
        unpack_semdup_fields(truncated)
    not_utf8 = base64.b64encode(struct.pack("<BIIf", 1, 0, 1, 0.5) + b"\xff").decode()
    with pytest.raises(ValueError, match="not UTF-8"):
        unpack_semdup_fields(not_utf8)


def test_format_2_packs_vocabulary_ids_and_reads_names_through_the_bundle_table() -> None:
    table = ["<pad>", "<unk>", "visa", "qatar", "12\u00b704"]
    packed = pack_semdup_fields([0.6, 0.8], {"qatar": 0.25, "visa": 0.5}, term_ids=[3, 2])
    vector, terms = unpack_semdup_fields(packed, table)
    assert terms.ids.tolist() == [3, 2] and terms == {"qatar": 0.25, "visa": 0.5} and len(terms) == 2
    assert vector is not None and vector.tolist() == [np.float32(0.6), np.float32(0.8)]
    _, no_table = unpack_semdup_fields(packed)
    assert no_table.ids.tolist() == [3, 2] and len(no_table) == 2  # the fusion needs only the ids
    with pytest.raises(ValueError, match="vocabulary ids"):
        dict(no_table)
    with pytest.raises(ValueError, match="outside the bundle's 3 features"):
        dict(unpack_semdup_fields(packed, table[:3])[1])
    with pytest.raises(ValueError, match="2 term ids for 1 term weights"):
        pack_semdup_fields(None, {"a": 1.0}, term_ids=[1, 2])
    with pytest.raises(ValueError, match="not what its header announces"):
        unpack_semdup_fields(base64.b64encode(base64.b64decode(packed)[:-1]).decode())


def test_unpacked_terms_read_as_the_dict_they_stand_for() -> None:
    _, terms = unpack_semdup_fields(pack_semdup_fields(None, {"b": 0.25, "a": 0.5}))
    assert terms == {"b": 0.25, "a": 0.5} and dict(terms) == {"b": 0.25, "a": 0.5}
    assert terms.names == ["b", "a"] and terms.weights.dtype == np.float32
    assert terms["a"] == 0.5 and "c" not in terms and terms.get("c") is None and len(terms) == 2


def test_stored_fields_prefer_the_packed_copy_and_read_older_documents() -> None:
    fields = {"vector": [0.6, 0.8], "terms": {"a": 0.25, "b": 0.5}, "model": "m"}
    new = stored_semdup_fields(json.loads(json.dumps(semdup_source(fields), default=lambda a: a.tolist())))
    old = stored_semdup_fields({"model": "m", "vector": [0.6, 0.8], "terms": {"a": 0.25, "b": 0.5}})
    for got in (new, old):
        assert got["model"] == "m" and got["terms"] == {"a": 0.25, "b": 0.5}
        assert got["vector"].dtype == np.float32 and got["vector"].tolist() == np.float32([0.6, 0.8]).tolist()
    assert stored_semdup_fields({}) == {}


# --- request bodies and the client serializer -----------------------------------------------------------------
def test_every_candidate_path_asks_for_the_components_and_no_packed_fields() -> None:
    params = components_params("m", np.float32([0.6, 0.8]), None, None)
    query = SourceQuery("x", 7, components=params)
    sparse = sparse_query({"a": 1.0}, query)
    knn = knn_query([0.5, 0.5], query)
    for body in (sparse, knn):
        assert "docvalue_fields" not in body and body["script_fields"] == script_fields(params)
    assert knn["query"]["knn"]["semdup.vector"]["method_parameters"] == {"ef_search": 14}
    template = TemplateSource("bm25").request(query)
    assert template["script_fields"] == script_fields(params) and "docvalue_fields" not in template
    assert "script_fields" not in TemplateSource("bm25").request(SourceQuery("x", 5))
    fields = template_params("x", docvalue_fields=list(DOCVALUE_FIELDS))
    assert fields["docvalue_fields"] == list(DOCVALUE_FIELDS) and fields["has_docvalue_fields"] is True
    assert "has_docvalue_fields" not in template_params("x")


def test_hnsw_parameters_are_in_the_knn_mapping() -> None:
    body = index_body(dimension=4, fields=CandidateFields(knn=True))
    vector = body["mappings"]["properties"]["semdup"]["properties"]["vector"]
    assert vector["method"]["parameters"] == HNSW_PARAMETERS
    packed = index_body(dimension=4)["mappings"]["properties"]["semdup"]["properties"]["packed"]
    assert packed == {"type": "binary", "doc_values": True}


def test_orjson_serializer_reads_and_writes_what_the_stdlib_one_does() -> None:
    from opensearchpy.serializer import JSONSerializer

    fast, plain = orjson_serializer(), JSONSerializer()
    body = {
        "hits": {"hits": [{"_id": "7", "_score": 1.2345678901234567, "fields": {"semdup.packed": ["AQ"]}}]},
        "text": 'quote " back\\slash \u00e9 \U0001f600',
        "n": [0, -1, 2**62, 1e-300, 3.5],
        "ok": True,
        "none": None,
    }
    text = plain.dumps(body)
    assert fast.loads(text) == plain.loads(text)
    assert json.loads(fast.dumps(body)) == json.loads(text)
    request = {"query": {"knn": {"v": {"vector": np.float32([0.1, -2.5]), "k": np.int64(3)}}}, 1: "int key"}
    assert json.loads(fast.dumps(request)) == json.loads(plain.dumps(request))
    assert fast.dumps("already text") == "already text"


# --- real OpenSearch ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_posts() -> list[Post]:
    return sample_posts(60)


@pytest.fixture(scope="module")
def bundle(real_posts: list[Post], tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("packed-bundle")
    ckpt = tiny_checkpoint("bow-cnn", real_posts, root / "ckpt")
    return Bundle.load(export_checkpoint(ckpt, root / "bow-cnn", parity_posts=real_posts[:8]).bundle_dir)


def _has_knn(client: Any) -> bool:
    return "opensearch-knn" in {p.get("component") for p in client.cat.plugins(format="json")}


@pytest.fixture(scope="module")
def new_index(opensearch_client: Any, bundle: Bundle, real_posts: list[Post]) -> Iterator[str]:
    """An index written by today's ``index_batch`` (documents carry ``semdup.packed``)."""
    import uuid

    index = f"semdup-test-packed-{uuid.uuid4().hex[:8]}"
    create_index(opensearch_client, index, dimension=bundle.dimension, knn=_has_knn(opensearch_client), sparse=True)
    search = ensure_index_model(opensearch_client, index, bundle.version)
    assert search == CandidateFields(sparse=True, knn=_has_knn(opensearch_client))
    register_templates(opensearch_client)
    assert not index_batch(opensearch_client, index, [p.to_json() for p in real_posts], bundle, search=search).failed
    opensearch_client.indices.refresh(index=index)
    yield index
    opensearch_client.indices.delete(index=index, ignore_unavailable=True)


def _old_layout_index(client: Any, index: str, bundle: Bundle, posts: list[Post]) -> None:
    """An index as semdup wrote it before ``semdup.packed``: no such mapping, documents without it, and always
    ``terms`` and ``vector`` (a float array where the k-NN plugin is missing)."""
    knn = _has_knn(client)
    body = index_body(dimension=bundle.dimension, fields=CandidateFields(sparse=True, knn=knn))
    semdup_props = body["mappings"]["properties"]["semdup"]["properties"]
    del semdup_props["packed"]
    if not knn:
        semdup_props["vector"] = {"type": "float", "index": False, "doc_values": False}
    client.indices.create(index=index, body=body)
    client.indices.put_mapping(index=index, body={"_meta": {"semdup_model": bundle.version}})
    every = CandidateFields(sparse=True, knn=True)  # writes terms and vector, as the older semdup did
    for post, fields in zip(posts, bundle.document_fields(posts), strict=True):
        semdup = {k: v for k, v in semdup_source(fields, every).items() if k != "packed"}
        doc = {**lexical_document(post), "semdup": semdup}
        client.index(index=index, id=post.id, body=doc)
    client.indices.refresh(index=index)


def test_hits_carry_the_offline_vectors_and_weights_bit_for_bit(
    opensearch_client: Any, bundle: Bundle, real_posts: list[Post], new_index: str
) -> None:
    body = {"size": 100, "_source": False, "docvalue_fields": list(DOCVALUE_FIELDS), "query": {"match_all": {}}}
    hits = opensearch_client.search(index=new_index, body=body)["hits"]["hits"]
    expected = {p.id: f for p, f in zip(real_posts, bundle.document_fields(real_posts), strict=True)}
    assert {h["_id"] for h in hits} == set(expected)
    for hit in hits:
        exp = expected[hit["_id"]]
        assert hit["fields"]["semdup.model"] == [bundle.version]
        vector, terms = unpack_semdup_fields(hit["fields"]["semdup.packed"][0], bundle.feature_names())
        assert np.array_equal(vector, np.asarray(exp["vector"], dtype=np.float32)), hit["_id"]
        assert list(terms) == list(exp["terms"])
        assert all(np.float32(terms[k]) == np.float32(w) for k, w in exp["terms"].items()), hit["_id"]


def test_template_renders_the_docvalue_and_script_fields(opensearch_client: Any) -> None:
    register_templates(opensearch_client)
    params = template_params("x", size=3, docvalue_fields=list(DOCVALUE_FIELDS))
    assert render_template(opensearch_client, template_id("lmj", "title"), params)["docvalue_fields"] == list(
        DOCVALUE_FIELDS
    )
    assert "docvalue_fields" not in render_template(opensearch_client, template_id("bm25"), template_params("x"))
    script = script_fields({"model": "m", "qv": [0.6, 0.8], "qvn": 1.0})  # JSON as the client sends it
    rendered = render_template(opensearch_client, template_id("bm25"), template_params("x", script_fields=script))
    assert rendered["script_fields"]["semdup"]["script"]["id"] == COMPONENTS_SCRIPT_ID
    assert rendered["script_fields"]["semdup"]["script"]["params"]["qv"] == pytest.approx([0.6, 0.8])
    # the body the reranker builds is what the stored template renders, for every model, variant and parameter
    for model, variant in (("bm25", "text"), ("dfr", "title"), ("tfidf", "text")):
        for params in (template_params("visa \"qatar\" \\ stay", size=7, exclude_id="8\"7", ids=["1", "2"],
                                       script_fields=script),
                       template_params("x", docvalue_fields=list(DOCVALUE_FIELDS)), template_params("y")):
            rendered = render_template(opensearch_client, template_id(model, variant), params)
            assert template_body(model, variant, params) == rendered, (model, variant, params)


def test_older_documents_rank_the_same_through_the_source_fallback(
    opensearch_client: Any, unique_index: str, bundle: Bundle, real_posts: list[Post], new_index: str
) -> None:
    """Documents without ``packed`` are read from ``_source``; scores equal the in-cluster path's."""
    _old_layout_index(opensearch_client, unique_index, bundle, real_posts)
    all_paths = {"templates": ("bm25", "dfr"), "sparse": True}  # k-NN left out: two HNSW graphs may differ
    settings = RerankerSettings(k_candidates=20, **all_paths)
    packed = Reranker(bundle, opensearch_client, new_index, settings)
    old = Reranker(bundle, opensearch_client, unique_index, RerankerSettings(k_candidates=20, **all_paths))
    for q in real_posts[:6]:
        want = packed.rank(q, k=50, exclude_id=q.id)
        got = old.rank(q, k=50, exclude_id=q.id)
        assert [c.id for c in got] == [c.id for c in want]
        assert max(abs(a.score - b.score) for a, b in zip(got, want, strict=True)) <= TOLERANCE


def test_ensure_index_model_adds_packed_to_an_older_index_and_new_writes_fill_it(
    opensearch_client: Any, unique_index: str, bundle: Bundle, real_posts: list[Post]
) -> None:
    posts = real_posts[:10]
    _old_layout_index(opensearch_client, unique_index, bundle, posts)
    search = ensure_index_model(opensearch_client, unique_index, bundle.version)
    assert search == CandidateFields(sparse=True, knn=_has_knn(opensearch_client))  # what the older index holds
    props = opensearch_client.indices.get_mapping(index=unique_index)[unique_index]["mappings"]["properties"]
    assert props["semdup"]["properties"]["packed"] == {"type": "binary", "doc_values": True}
    assert not index_batch(opensearch_client, unique_index, [p.to_json() for p in posts[:4]], bundle).failed
    opensearch_client.indices.refresh(index=unique_index)
    body = {"size": 20, "_source": False, "docvalue_fields": ["semdup.packed"], "query": {"match_all": {}}}
    hits = opensearch_client.search(index=unique_index, body=body)["hits"]["hits"]
    assert sorted(h["_id"] for h in hits if "fields" in h) == sorted(p.id for p in posts[:4])
