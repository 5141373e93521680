"""experiments/onehop_quality.py: the site searches it sends (the ranking itself runs on a real node)."""

from __future__ import annotations

from experiments.onehop_quality import site_search
from semdup.core.posts import Post


def test_a_new_post_is_searched_by_its_title_and_body_without_itself() -> None:
    body = site_search(Post("9", "Visa", "for Qatar"), 100)
    assert body["size"] == 100 and body["query"]["bool"] == {
        "should": [{"match": {"title": "Visa"}}, {"match": {"body": "for Qatar"}}],
        "must_not": [{"ids": {"values": ["9"]}}]}  # fmt: skip


def test_semevals_candidates_are_the_sites_filter() -> None:
    body = site_search(Post("q", "", "train to Paris"), 10, ["a", "b"], exclude=False)
    assert body["query"]["bool"] == {"should": [{"match": {"body": "train to Paris"}}],
                                     "filter": [{"ids": {"values": ["a", "b"]}}]}  # fmt: skip
