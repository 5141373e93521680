"""Search templates and the lexical index, against a real OpenSearch (no mock)."""

from __future__ import annotations

import pytest

from semdup.core.posts import Post
from semdup.index_format.schema import LEXICAL_MODELS, feature_name, index_body, lexical_field
from semdup.ingest.lexical_index import create_index, load_posts
from semdup.search_templates import (
    VARIANTS,
    all_templates,
    msearch_templates,
    register_templates,
    render_template,
    template_id,
    template_params,
)

POSTS = [
    Post("p1", "How to mount a USB drive", "<p>I plugged in my <code>usb</code> drive, see http://example.org/x</p>"),
    Post("p2", "Visa for Qatar", "Do I need a visa to visit Doha?"),
    Post("p3", "mount usb on ubuntu 12.04", ""),
    Post("p4", "", "Where can I buy massage oil in Doha?"),
]


def test_every_model_has_both_variants_and_a_distinct_field():
    templates = all_templates()
    assert len(templates) == len(LEXICAL_MODELS) * len(VARIANTS)
    fields = {lexical_field(m, "text") for m in LEXICAL_MODELS}
    assert len(fields) == len(LEXICAL_MODELS)


def test_unknown_names_are_refused_with_the_accepted_values():
    with pytest.raises(ValueError, match="known: bm25"):
        template_id("bm26")
    with pytest.raises(ValueError, match="title, text"):
        template_id("bm25", "body")


def test_feature_names_never_hold_dots():
    assert feature_name("12.04") == "12\u00b704" and "." not in feature_name("a.b.c")


def test_index_body_declares_six_similarities():
    body = index_body()
    sims = body["settings"]["index"]["similarity"]
    assert {s["type"] for s in sims.values()} == {"BM25", "LMJelinekMercer", "LMDirichlet", "DFR", "IB", "scripted"}


@pytest.mark.opensearch
def test_render_fills_filters_and_escapes_text(opensearch_client):
    register_templates(opensearch_client)
    out = render_template(
        opensearch_client,
        template_id("dfr", "title"),
        template_params('say "hi" \\ there', size=7, exclude_id="p1", ids=["p2", "p3"]),
    )
    assert out["size"] == 7
    assert out["query"]["bool"]["must"][0]["match"]["title.dfr"]["query"] == 'say "hi" \\ there'
    assert out["query"]["bool"]["filter"] == [{"ids": {"values": ["p2", "p3"]}}]
    assert out["query"]["bool"]["must_not"] == [{"ids": {"values": ["p1"]}}]
    bare = render_template(opensearch_client, template_id("bm25"), template_params("x"))
    assert bare["query"]["bool"]["filter"] == [] and bare["query"]["bool"]["must_not"] == []


@pytest.mark.opensearch
@pytest.mark.parametrize("model", list(LEXICAL_MODELS))
def test_each_model_retrieves_through_msearch(opensearch_client, unique_index, model):
    create_index(opensearch_client, unique_index)
    report = load_posts(opensearch_client, unique_index, POSTS, progress=False)
    assert report.written == len(POSTS) and report.ok
    register_templates(opensearch_client)
    text_hits, title_hits, restricted = msearch_templates(
        opensearch_client,
        unique_index,
        [
            (template_id(model, "text"), template_params("mount usb drive", size=3)),
            (template_id(model, "title"), template_params("mount usb", size=3, exclude_id="p1")),
            (template_id(model, "text"), template_params("doha", size=5, ids=["p2"])),
        ],
    )
    assert text_hits[0].id == "p1"  # title and body both match
    assert {h.id for h in title_hits} == {"p3"}  # p1 excluded; p4 has no title
    assert [h.id for h in restricted] == ["p2"]  # p4 matches doha too but is outside the id set


@pytest.mark.opensearch
def test_a_post_with_neither_title_nor_body_is_reported_not_dropped(opensearch_client, unique_index):
    from semdup.core.errors import BulkWriteError

    create_index(opensearch_client, unique_index)
    with pytest.raises(BulkWriteError) as err:
        load_posts(opensearch_client, unique_index, [POSTS[0], Post("empty", "", "  ")], progress=False)
    assert err.value.failures[0].id == "empty" and "neither title nor body" in err.value.failures[0].reason
    opensearch_client.indices.refresh(index=unique_index)
    assert opensearch_client.count(index=unique_index)["count"] == 1  # the good post is written
