"""The site's query -> its restriction skeleton: text in scoring positions relaxed, every restriction kept."""

from __future__ import annotations

from typing import Any

import pytest

from semdup.core.errors import PostError
from semdup.reranker.restriction import check_depth, demotions, is_text_clause, leaf_count, restriction

FIELDS = ("Title", "Body")
TEXT = {"match": {"Title": "Visa on arrival"}}
IDS = {"ids": {"values": ["1", "2"]}}


@pytest.mark.parametrize(("query", "skeleton"), [
    (TEXT, None),
    ({"match_all": {}}, None),
    (IDS, IDS),
    ({"bool": {"must": [TEXT, IDS]}}, {"bool": {"filter": [IDS]}}),  # ids inside must
    ({"bool": {"must": [TEXT], "should": [IDS]}}, None),  # an optional should restricts nothing
    ({"bool": {"should": [TEXT, IDS]}}, None),  # "text or these ids": the text, relaxed, allows all
    ({"bool": {"should": [TEXT, IDS], "minimum_should_match": 2}},
     {"bool": {"should": [{"match_all": {}}, IDS], "minimum_should_match": "2"}}),
    ({"function_score": {"query": {"bool": {"must": TEXT, "filter": {"term": {"tenant": "a"}}}},
                         "functions": [{"filter": IDS, "weight": 2}]}},
     {"bool": {"filter": [{"term": {"tenant": "a"}}]}}),
    ({"constant_score": {"filter": IDS}}, {"bool": {"filter": [IDS]}}),
    ({"boosting": {"positive": {"bool": {"must": [TEXT, IDS]}}, "negative": {"term": {"x": "y"}},
                   "negative_boost": 0.5}}, {"bool": {"filter": [IDS]}}),
    ({"bool": {"must": [{"bool": {"should": [TEXT], "must_not": [IDS]}}]}},
     {"bool": {"filter": [{"bool": {"must_not": [IDS]}}]}}),  # nested bools
    ({"dis_max": {"queries": [IDS, {"term": {"t": "x"}}]}},
     {"bool": {"should": [IDS, {"term": {"t": "x"}}], "minimum_should_match": "1"}}),
    ({"function_score": {"query": TEXT, "min_score": 3}}, {"function_score": {"query": TEXT, "min_score": 3}}),
    ({"nested": {"path": "c", "query": {"match": {"c.text": "x"}}}},
     {"nested": {"path": "c", "query": {"match": {"c.text": "x"}}}}),  # unknown compound: verbatim
    ({"bool": {"must": [TEXT], "filter": [{"match": {"Tags": "qatar"}}]}},
     {"bool": {"filter": [{"match": {"Tags": "qatar"}}]}}),  # text in a filter position restricts
])
def test_each_shape_keeps_its_restriction(query: dict[str, Any], skeleton: dict[str, Any] | None) -> None:
    assert restriction(query, FIELDS) == skeleton


@pytest.mark.parametrize(("clause", "text"), [
    ({"match": {"Title.english": "x"}}, True),
    ({"match_phrase": {"Body": {"query": "x"}}}, True),
    ({"match": {"tenant": "acme"}}, False),  # a match on another field is a restriction
    ({"multi_match": {"query": "x", "fields": ["Title^2", "Body"]}}, True),
    ({"multi_match": {"query": "x", "fields": ["Title", "status"]}}, False),
    ({"query_string": {"query": "visa arrival"}}, True),
    ({"query_string": {"query": "visa AND tags:qatar"}}, False),  # a field term in the search box's syntax
    ({"query_string": {"query": "visa _exists_:closed"}}, False),
    ({"simple_query_string": {"query": "visa", "fields": ["*"]}}, True),
    ({"term": {"Title": "visa"}}, False),
])
def test_text_is_told_apart_from_a_restriction(clause: dict[str, Any], text: bool) -> None:
    ((kind, spec),) = clause.items()
    assert is_text_clause(kind, spec, FIELDS) is text


def test_a_malformed_fields_list_is_refused() -> None:
    with pytest.raises(PostError, match="fields must be a list"):
        restriction({"query_string": {"query": "x", "fields": 7}}, FIELDS)


def test_depth_is_bounded_iteratively() -> None:
    deep: dict[str, Any] = IDS
    for _ in range(200):
        deep = {"constant_score": {"filter": deep}}
    with pytest.raises(PostError, match="levels deep"):
        restriction({"bool": {"must_not": [deep]}}, FIELDS)
    check_depth({"bool": {"filter": [IDS]}})  # a usual query passes


def test_demotions_are_the_boosting_negatives_in_scoring_positions() -> None:
    neg = {"term": {"status": "closed"}}
    query = {"bool": {"must": [{"boosting": {"positive": TEXT, "negative": neg, "negative_boost": 0.25}}],
                      "filter": [{"boosting": {"positive": IDS, "negative": IDS, "negative_boost": 0.5}}]}}
    assert demotions(query) == [(neg, 0.25)]


def test_leaf_count_is_an_upper_bound_of_the_terms() -> None:
    assert leaf_count({"match": {"Title": "visa on arrival"}}) == 3
    assert leaf_count({"match_all": {}}) == 1
    assert leaf_count({"match": {"Title": "签证"}}) >= 2  # the standard analyzer makes a term per ideograph
