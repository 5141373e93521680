"""A cluster where nobody stored semdup's search templates (no evaluation run on it, an operator's cluster).

OpenSearch drops a ``_msearch/template`` request whose stored script is missing and then refuses the empty batch
("no requests added"): every rerank and every flagging task failed on such a cluster. The reranker now stores the
templates it searches with before its first search, and creating or enabling an index stores all of them.
"""

from __future__ import annotations

from typing import Any

import pytest

from semdup.bundle import Bundle
from semdup.core.posts import Post
from semdup.ingest.lexical_index import create_index
from semdup.reranker.reranker import Reranker
from semdup.reranker.settings import RerankerSettings
from semdup.search_templates import all_templates, template_id

pytestmark = pytest.mark.opensearch


def _drop_templates(client: Any) -> None:
    for tid in all_templates():
        client.delete_script(id=tid, ignore=[404])


def _stored(client: Any, tid: str) -> bool:
    return bool(client.get_script(id=tid, ignore=[404]).get("found"))


def test_the_reranker_stores_its_templates_before_its_first_search(
    opensearch_client: Any, served: tuple[Bundle, str], real_posts: list[Post]
) -> None:
    bundle, index = served
    _drop_templates(opensearch_client)
    try:
        rr = Reranker(bundle, opensearch_client, index, RerankerSettings(templates=("lmj", "bm25")))
        post = real_posts[3]
        ranked = rr.rank(post, k=5, exclude_id=post.id)
        assert ranked and all(c.id != post.id for c in ranked)
        assert _stored(opensearch_client, template_id("lmj", "text"))
        assert _stored(opensearch_client, template_id("bm25", "text"))
        assert not _stored(opensearch_client, template_id("dfr", "text"))  # only what it searches with
        # a per-request choice of other templates stores those too
        assert rr.with_settings(templates=("dfr",)).rank(post, k=5, exclude_id=post.id)
        assert _stored(opensearch_client, template_id("dfr", "text"))
    finally:
        _drop_templates(opensearch_client)
        create_index(opensearch_client, f"{index}-templates", dimension=bundle.dimension)  # stores all again
        opensearch_client.indices.delete(index=f"{index}-templates")
    assert all(_stored(opensearch_client, tid) for tid in all_templates())
