"""The default (lexical-only) candidate search runs while the query is encoded, not after it.

The fake bundle's encoding and the fake cluster's search each wait for the other to have started: run one after
the other, in either order, the first one waits in vain and the test fails; run together, both go through.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from semdup.core.errors import OpenSearchUnavailable
from semdup.core.posts import Post
from semdup.index_format.schema import CandidateFields
from semdup.reranker.reranker import Reranker
from semdup.reranker.settings import RerankerSettings

WAIT_S = 5.0


class MeetingBundle:
    """Encodes only once the search has started."""

    version = "hybrid-minilm-0123abcd"
    fusion = {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.0}
    term_weights = None
    dimension = 2
    threshold = None
    uses_title = False

    def __init__(self, searching: threading.Event, encoding: threading.Event) -> None:
        self.searching, self.encoding = searching, encoding

    def encode_query(self, post: Post) -> tuple[np.ndarray, None]:
        self.encoding.set()
        assert self.searching.wait(WAIT_S), "the search did not start while the query was being encoded"
        return np.array([1.0, 0.0], dtype=np.float32), None


class MeetingCluster:
    """Answers the search only once the encoding has started (or fails, like a cluster that is down)."""

    def __init__(self, searching: threading.Event, encoding: threading.Event, down: bool = False) -> None:
        self.searching, self.encoding, self.down = searching, encoding, down

    def msearch_template(self, body: Any, params: Any = None) -> dict[str, Any]:
        self.searching.set()
        assert self.encoding.wait(WAIT_S), "the query was not being encoded while the search ran"
        if self.down:
            from opensearchpy.exceptions import ConnectionError as ClientConnectionError

            from semdup.core.opensearch import client_error

            refused = ClientConnectionError("N/A", "connection refused", None)
            raise client_error(refused, "POST", "/_msearch/template")  # as the client raises it
        return {"responses": [{"hits": {"hits": [{"_id": "7", "_score": 3.5}]}}]}


def _reranker(down: bool = False) -> Reranker:
    searching, encoding = threading.Event(), threading.Event()
    bundle, cluster = MeetingBundle(searching, encoding), MeetingCluster(searching, encoding, down)
    rr = Reranker(bundle, cluster, "posts", RerankerSettings())  # type: ignore[arg-type]
    # the index was resolved and its templates stored (what the first IndexResolver.resolve records)
    rr.indices._mapped["posts"] = ("posts", CandidateFields())
    rr.indices._stored.add(("bm25", "text"))
    return rr


def test_the_lexical_search_runs_while_the_query_is_encoded() -> None:
    cands, query = _reranker().retrieve(Post("q", "Visa for Qatar?", ""), exclude_id="q")
    assert cands.ids == ["7"] and cands.lexical == {"7": 3.5}
    assert query.vector is not None and query.terms is None and query.title is None


def test_a_cluster_that_is_down_is_still_the_error_the_caller_gets() -> None:
    with pytest.raises(OpenSearchUnavailable):
        _reranker(down=True).retrieve(Post("q", "Visa for Qatar?", ""))
