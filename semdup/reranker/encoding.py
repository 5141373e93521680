"""The query's encoding, and how many of them run at once: :class:`QueryEncoder`.

A query is encoded once per rerank: its dense vector and BOW weights (``Bundle.encode_query``, tokenised once for
both) and, for a bundle with a title term, its title's own vector (``Bundle.encode_titles``). Each is its own
onnxruntime run with nothing padded: batched together, the title would be padded to the body's length, costing
as much as the body and moving its vector by float rounding (1e-7), so rankings would not stay equal to the bit.

The thread policy: an encoding runs with all of the session's intra-op threads (``SEMDUP_ONNX_THREADS``, 2 by
default: a lone request gets both cores; onnxruntime gives the same vectors, to the bit, with 1 thread or 2), and
at most ``usable CPUs // threads`` encodings run at once in a process. When the service is busy, requests take
their turns at the encoder, each with both cores, instead of sharing them one core each: the same work per
second, and the first in line is answered sooner.

The title runs beside the body, on a helper thread, in the same session: one short sequence does not keep two
cores busy (a lone body encodes barely faster on 2 threads than on 1), so the title's run fills the idle one. Each
run computes what it computes alone, so the vectors are the same to the bit (``tests/unit/reranker``).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from semdup.core.posts import Post
from semdup.reranker.settings import usable_cpus

__all__ = ["QueryEncoder", "QueryEncoding"]


@dataclass(frozen=True)
class QueryEncoding:
    """The query as the fusion reads it: dense vector, BOW weights, and the title's own vector (each None when the
    bundle has no such path, the title also when the query has none)."""

    vector: np.ndarray | None
    terms: Any
    title: np.ndarray | None = None


def session_threads(bundle: Any) -> int:
    """The intra-op threads of the bundle's onnxruntime session (its cores' count where onnxruntime chooses)."""
    session = getattr(bundle, "session", None)
    threads = session.get_session_options().intra_op_num_threads if hasattr(session, "get_session_options") else 1
    return int(threads) or usable_cpus()


class QueryEncoder:
    """Encodes queries with a bundle on the thread policy of the module doc; thread-safe.

    Args:
        bundle: a loaded :class:`~semdup.bundle.bundle.Bundle` (its session's threads are each encoding's).
        max_wordpieces: cut the query at this many wordpieces (a transformer bundle); None, the default: the
            bundle's own limit, so the service's scores equal the offline model's.
    """

    def __init__(self, bundle: Any, max_wordpieces: int | None = None) -> None:
        self.bundle = bundle
        self.max_wordpieces = max_wordpieces
        self.slots = max(1, usable_cpus() // session_threads(bundle))
        self._turns = threading.BoundedSemaphore(self.slots)

    def encode_post(self, post: Post, with_title: bool = True) -> QueryEncoding:
        """The post's dense vector and BOW weights, and (``with_title``) its title's vector when the fusion reads
        one.

        Raises:
            PostError: a post with neither title nor body, or binary text.
        """
        bundle, cut = self.bundle, self.max_wordpieces
        with self._turns:
            pending: Future[Any] | None = None
            if with_title and post.title and bundle.uses_title:
                pending = _titles().submit(bundle.encode_titles, [post])
            try:
                vector, terms = (bundle.encode_query(post) if cut is None
                                 else bundle.encode_query(post, max_wordpieces=cut))
            finally:
                title = pending.result()[0] if pending is not None else None  # its error too, once the body's is out
        return QueryEncoding(vector, terms, title)


_pool_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (pid, pool): a forked child makes its own


def _titles() -> ThreadPoolExecutor:
    """The process's title-encoding threads (one per concurrent encoding at most: the encoder's slots bound them)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(max_workers=max(2, usable_cpus()),
                                                     thread_name_prefix="semdup-title"))  # fmt: skip
        return _pool[1]
