"""Flag likely duplicates of new posts: rank each against the posts already indexed, keep those past the threshold.

    reranker = Reranker.from_bundle(bundle_path, client, "travel")   # with <bundle>.calibration.json beside it
    flags = flag_duplicates(reranker, client, "travel", [Post("123", "Visa for Qatar?", "...")])
    # -> [Flag(post_id="123", candidate_id="87", probability=0.91, ...)], also stored in semdup-duplicates

The decision is the reranker's: a complete candidate whose fused score reaches the decision threshold (the
calibration's, else the bundle's); the probability is the calibration's Platt probability (None without one).
Without any threshold nothing could be decided, so flagging refuses to start (:class:`ConfigError`) rather than
flag everything or nothing.

A post no longer in the index when its flags are about to be written (deleted meanwhile) gets none, and loses
those it had; so does a post whose text cannot be scored (empty, binary).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from semdup.alerts.store import FLAGS_INDEX, Flag, delete_flags, replace_flags
from semdup.core.errors import ConfigError, PostError
from semdup.core.index_names import check_index_name
from semdup.core.posts import Post
from semdup.index_format.companion import SourceFields, companion_of
from semdup.index_format.documents import stored_post
from semdup.indexer.sync import read_source_posts
from semdup.reranker.reranker import Candidate, Reranker

__all__ = ["Flag", "flag_duplicates", "decision_threshold", "read_posts", "present_ids"]

logger = logging.getLogger(__name__)


def decision_threshold(reranker: Reranker) -> float:
    """The threshold flags are decided at: the calibration's, else the bundle's.

    Raises:
        ConfigError: neither the bundle nor a calibration has one.
    """
    threshold = reranker.threshold
    if threshold is None:
        raise ConfigError(
            f"bundle {reranker.version} has no duplicate threshold and no calibration gives one, so no post can be "
            "flagged; fit one on held-out duplicates (`semdup fit-default` on a Stack Exchange dump writes one, "
            "as does a checkout's `python -m experiments.alerts_eval --save-calibration`; `semdup calibrate` from a "
            "site's verdicts and links; `semdup eval decisions --fit` for pairs) and put the "
            "<bundle>.calibration.json beside the bundle"
        )
    return float(threshold)


def _source_of(client: Any, index: str) -> SourceFields:
    """Where the posts' raw text is: the site's index for one connected by ``semdup enable``, else the index."""
    found = companion_of(client, index)
    return found[1] if found is not None else SourceFields(index, "title", "body")


def read_posts(
    client: Any, index: str, ids: Sequence[str], *, to_encode: bool = False
) -> tuple[list[Post], list[str]]:
    """``(posts found, ids not in the index)``: the text as the index holds it now (a real-time ``mget`` on each
    index behind an alias: :func:`semdup.indexer.sync.read_source_posts`).

    ``to_encode``: the posts go to an encoder (flagging, calibration, training pairs), not to a reader. An index
    semdup created holds cleaned text, which a second cleaning would change
    (:func:`semdup.index_format.documents.stored_post`); a site's own index holds its raw text, read as it is.
    """
    if not ids:
        return [], []
    companion = companion_of(client, index)
    source = companion[1] if companion is not None else SourceFields(index, "title", "body")
    current = read_source_posts(client, source, ids)
    make = stored_post if to_encode and companion is None else Post
    found = [make(p["id"], p["title"], p["body"]) for p in current.values()]
    return found, [str(i) for i in ids if str(i) not in current]


def present_ids(client: Any, index: str, ids: Sequence[str]) -> set[str]:
    """Which of ``ids`` are in ``index`` (or the site's index) now."""
    return set(read_source_posts(client, _source_of(client, index), ids)) if ids else set()


def _is_flag(c: Candidate, threshold: float) -> bool:
    return c.complete and c.score >= threshold


def flag_duplicates(
    reranker: Reranker,
    client: Any,
    index: str,
    posts: Sequence[Post],
    *,
    k: int = 10,
    store: str = FLAGS_INDEX,
) -> list[Flag]:
    """Flag each post's likely duplicates among the other posts of ``index`` and record them in ``store``.

    Args:
        reranker: ranks candidates; its calibration (or bundle) gives the threshold and probabilities.
        index: the index (or alias) holding the posts and their semdup fields.
        posts: the new or edited posts (their own ids are excluded from their candidates).
        k: at most this many flags per post (the top ``k`` candidates are looked at).

    Returns:
        the flags written, by post, best first.

    Raises:
        ConfigError: no decision threshold (see :func:`decision_threshold`), a bad index name, ``k < 1``.
        OpenSearchUnavailable / SearchTimeout: the cluster is down or slow (nothing half-written stays wrong:
            a retry writes the same flags).
    """
    if k < 1:
        raise ConfigError(f"k must be at least 1, got {k}")
    check_index_name(index)
    threshold = decision_threshold(reranker)
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    by_post: dict[str, list[Flag]] = {}
    for post in dict((p.id, p) for p in posts).values():  # a post given twice is flagged once, with its last text
        try:
            cands = reranker.rank(post, k=k, exclude_id=post.id, index=index)
        except PostError as exc:
            logger.warning("post %s of %s cannot be scored (%s); it gets no flags", post.id, index, exc)
            cands = []
        by_post[post.id] = [
            Flag(index, post.id, c.id, c.probability, c.score, reranker.version, now)
            for c in cands
            if _is_flag(c, threshold)
        ]
    present = present_ids(client, index, list(by_post))
    gone = [i for i in by_post if i not in present]
    if gone:
        logger.info("%d posts of %s were deleted before their flags were written; they get none", len(gone), index)
        delete_flags(client, index, gone, store)
    flags = [f for pid, fs in by_post.items() if pid in present for f in fs]
    replace_flags(client, index, [i for i in by_post if i in present], flags, store)
    logger.info(
        "flagged %d likely duplicates for %d posts of %s (threshold %.4f, model %s)",
        len(flags),
        len(present),
        index,
        threshold,
        reranker.version,
    )
    return flags
