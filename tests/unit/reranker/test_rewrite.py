"""A site's search body -> the post it searches with, and semdup's ranking -> a query on the site's index."""

from __future__ import annotations

import numpy as np
import pytest

from semdup.core.errors import PostError
from semdup.reranker.rewrite import post_of_search, ranked_query


def test_title_and_body_come_from_the_clauses_on_their_fields() -> None:
    search = {"size": 5, "query": {"bool": {
        "should": [{"match": {"Title": "Visa on arrival"}}, {"match": {"Body.english": {"query": "How long?"}}}],
        "filter": [{"match": {"Tags": "qatar"}}],  # selects, does not describe the post
    }}}
    post = post_of_search(search, "Title", "Body")
    assert (post.title, post.body) == ("Visa on arrival", "How long?")


@pytest.mark.parametrize("query", [
    {"multi_match": {"query": "Visa on arrival", "fields": ["Title^2", "Body"]}},
    {"query_string": {"query": "Visa on arrival"}},
    {"match": {"text": "Visa on arrival"}},
    {"function_score": {"query": {"dis_max": {"queries": [{"match_phrase": {"Title": "Visa on arrival"}}]}}}},
    {"boosting": {"positive": {"simple_query_string": {"query": "Visa on arrival", "fields": ["*"]}},
                  "negative": {"match": {"Title": "spam"}}, "negative_boost": 0.1}},
])
def test_a_search_box_query_is_the_title(query: dict) -> None:
    post = post_of_search({"query": query}, "Title", "Body")
    assert (post.title, post.body) == ("Visa on arrival", "")


def test_a_search_without_text_is_refused() -> None:
    for search in ({"query": {"match_all": {}}}, {}, {"query": {"bool": {"filter": [{"term": {"Tags": "x"}}]}}}):
        with pytest.raises(PostError, match="no text"):
            post_of_search(search, "Title", "Body")


def test_a_deeply_nested_query_is_not_followed_forever() -> None:
    query: dict = {"match": {"Title": "deep"}}
    for _ in range(200):
        query = {"bool": {"must": [query]}}
    with pytest.raises(PostError):
        post_of_search({"query": query}, "Title", "Body")


def test_the_ranked_query_keeps_the_order_the_scores_and_the_sites_filters() -> None:
    search = {"query": {"bool": {"must": [{"match": {"Title": "x"}}], "filter": {"term": {"Tags": "qatar"}},
                                 "must_not": [{"ids": {"values": ["9"]}}]}}}
    ranked = [("a", 1.25), ("b", 0.5), ("c", 0.5), ("d", -0.3)]  # a tie (broken by id upstream) and a negative score
    query = ranked_query(search, ranked)
    clauses = query["bool"]["should"]
    assert [c["constant_score"]["filter"]["ids"]["values"] for c in clauses] == [["a"], ["b"], ["c"], ["d"]]
    boosts = [c["constant_score"]["boost"] for c in clauses]
    assert boosts[:2] == [1.25, 0.5]  # the fused score itself, as float32
    assert all(np.float32(x) > np.float32(y) > 0 for x, y in zip(boosts, boosts[1:]))  # strictly in order, positive
    assert query["bool"]["filter"] == [{"term": {"Tags": "qatar"}}]
    assert query["bool"]["must_not"] == [{"ids": {"values": ["9"]}}]
    assert query["bool"]["minimum_should_match"] == "1"  # a string: ml-commons reads JSON numbers as doubles


def test_no_candidate_matches_nothing() -> None:
    assert ranked_query({"query": {"match": {"Title": "x"}}}, []) == {"bool": {"must_not": [{"match_all": {}}]}}


def test_one_excluded_id_is_left_out_of_the_candidates_too() -> None:
    from semdup.reranker.rewrite import excluded_id

    assert excluded_id({"query": {"bool": {"must_not": [{"ids": {"values": ["42"]}}]}}}) == "42"
    assert excluded_id({"query": {"bool": {"must_not": {"ids": {"values": ["1", "2"]}}}}}) is None
    assert excluded_id({"query": {"match": {"Title": "x"}}}) is None
