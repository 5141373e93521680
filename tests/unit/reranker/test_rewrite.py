"""A site's search body -> the post it searches with, and semdup's ranking -> a query on the site's index."""

from __future__ import annotations

import numpy as np
import pytest

from semdup.core.errors import PostError
from semdup.reranker.restriction import leaf_count
from semdup.reranker.rewrite import candidate_room, check_encodable, post_of_search, ranked_query

FIELDS = ("Title", "Body")


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
    query = ranked_query(search, ranked, FIELDS)
    clauses = query["bool"]["should"]
    assert [c["constant_score"]["filter"]["ids"]["values"] for c in clauses] == [["a"], ["b"], ["c"], ["d"]]
    boosts = [c["constant_score"]["boost"] for c in clauses]
    assert boosts[:2] == [1.25, 0.5]  # the fused score itself, as float32
    assert all(np.float32(x) > np.float32(y) > 0 for x, y in zip(boosts, boosts[1:]))  # strictly in order, positive
    assert query["bool"]["filter"] == [{"bool": {"filter": [{"term": {"Tags": "qatar"}}],
                                                 "must_not": [{"ids": {"values": ["9"]}}]}}]  # the skeleton
    assert query["bool"]["minimum_should_match"] == "1"  # a string: ml-commons reads JSON numbers as doubles


def test_on_its_index_the_ranking_elsewhere_the_sites_own_query() -> None:
    site = {"match": {"Title": "x"}}
    query = ranked_query({"query": site}, [("a", 1.0)], FIELDS, index="site-a")
    ours, other = query["bool"]["should"]
    assert ours["bool"]["filter"] == [{"terms": {"_index": ["site-a"]}}]
    assert other == {"bool": {"must": [site], "must_not": [{"terms": {"_index": ["site-a"]}}]}}


def test_the_query_stays_within_max_clause_count() -> None:
    search = {"query": {"bool": {"should": [{"match": {"Title": "visa on arrival"}}],
                                 "filter": [{"terms": {"tenant": ["a", "b"]}}]}}}
    ranked = [(str(i), 1.0 / (i + 1)) for i in range(1200)]  # K_CANDIDATES=1000: ~1,200 candidates
    query = ranked_query(search, ranked, FIELDS, index="i", max_clauses=1024)
    ours, other = query["bool"]["should"]
    ranking = ours["bool"]["must"][0]["bool"]
    room = candidate_room(search, FIELDS, "i", 1024)
    assert len(ranking["should"]) == room > 800  # one Lucene clause per candidate, the best ones
    assert room + leaf_count([ranking["filter"], ours["bool"]["filter"], other]) <= 1024
    with pytest.raises(PostError, match="max_clause_count"):
        candidate_room({"query": {"match": {"Title": "w " * 2000}}}, FIELDS, "i", 1024)


def test_no_candidate_matches_nothing() -> None:
    nothing = {"bool": {"must_not": [{"match_all": {}}]}}
    assert ranked_query({"query": {"match": {"Title": "x"}}}, [], FIELDS) == nothing


def test_a_lone_surrogate_is_refused() -> None:
    check_encodable({"query": {"match": {"Title": "visa"}}})
    with pytest.raises(PostError, match="lone surrogate"):
        check_encodable({"query": {"bool": {"filter": [{"term": {"t": "\ud800"}}]}}})


def test_a_malformed_fields_list_is_refused_not_a_type_error() -> None:
    with pytest.raises(PostError, match="fields"):
        post_of_search({"query": {"query_string": {"query": "x", "fields": 7}}}, "Title", "Body")


def test_one_excluded_id_is_left_out_of_the_candidates_too() -> None:
    from semdup.reranker.rewrite import excluded_id

    assert excluded_id({"query": {"bool": {"must_not": [{"ids": {"values": ["42"]}}]}}}) == "42"
    assert excluded_id({"query": {"bool": {"must_not": {"ids": {"values": ["1", "2"]}}}}}) is None
    assert excluded_id({"query": {"match": {"Title": "x"}}}) is None
