"""Duplicate links read from a site's own index: a field of its documents that names the post a post duplicates.

``semdup learn --index SITE --duplicate-field FIELD`` learns from what a site already records (a Stack Exchange-like
``duplicate_of``, a ``closed_as_duplicate_of`` id, a list of ids). The site's index is only read, through the name
the operator gives (an alias is followed to every index behind it), never written. The title and body fields are
those ``semdup enable`` recorded for the site's companion, else the ones given.

Nothing is guessed: a value naming a post the index does not hold, a post naming itself, or a value that is no id
(an object, an empty string) is counted in the report and left out. Each kept link joins the two posts' duplicate
cluster, exactly as a dump's ``PostLinks.xml`` type 3 link does, so the result is ordinary ``retrieval``
supervision (:func:`semdup.data.learn_folds.fold_supervision` cuts it by cluster: the index holds no link
dates).

Example::

    sup = site_supervision(client, "site-posts", "duplicate_of")
    sup.report.line()   # "index site-posts, field duplicate_of (site-index): 120 queries, 131 duplicate and 0
                        #  non-duplicate links kept; left out: 3 missing post, 1 not an id; ..."
"""

from __future__ import annotations

import logging
from typing import Any

from semdup.core.errors import DataError, OpenSearchMissing, OpenSearchUnavailable, SearchIndexError
from semdup.core.posts import Post
from semdup.data.stackexchange import StackExchangeDump
from semdup.data.supervision import SourceReport, Supervision
from semdup.index_format.companion import SourceFields, companion_of, source_field, source_post
from semdup.opensearch_io.boundary import OpenSearch, scan

__all__ = ["site_supervision"]

logger = logging.getLogger(__name__)

_TIMEOUT = 60.0


def _ids(value: Any) -> tuple[list[str], int]:
    """The post ids a field's value names (an id, or a list of ids) and how many parts of it are no id."""
    items = value if isinstance(value, list) else [value]
    ids: list[str] = []
    bad = 0
    for item in items:
        if isinstance(item, bool) or not isinstance(item, str | int) or not str(item).strip():
            bad += 1
            continue
        ids.append(str(item).strip())
    return ids, bad


def site_supervision(client: OpenSearch, index: str, duplicate_field: str, title_field: str = "title",
                     body_field: str = "body") -> Supervision:
    """The duplicate links that ``duplicate_field`` records in the site's ``index`` (see the module doc).

    Raises:
        SearchIndexError: the index does not exist. OpenSearchUnavailable: the cluster stopped answering.
        DataError: no document holds a usable link.
    """
    connected = companion_of(client, index)
    source = connected[1] if connected is not None else SourceFields(index, title_field, body_field)
    body = {"query": {"match_all": {}}, "_source": [source.title, source.body, duplicate_field]}
    posts: dict[str, Post] = {}
    named: list[tuple[str, str]] = []
    bad = 0
    try:
        for hit in scan(client, index=source.index, query=body, size=500, scroll="5m", request_timeout=_TIMEOUT):
            src = hit.get("_source") or {}
            post = source_post(str(hit["_id"]), src, source)
            if post["title"].strip() or post["body"].strip():
                posts[post["id"]] = Post(id=post["id"], title=post["title"], body=post["body"])
            value = source_field(src, duplicate_field)
            if value is None:
                continue
            ids, n_bad = _ids(value)
            bad += n_bad
            named.extend((post["id"], target) for target in ids)
    except OpenSearchMissing as exc:
        raise SearchIndexError(f"no index or alias {index!r} to read duplicate links from") from exc
    except OpenSearchUnavailable as exc:
        raise exc.advising(f"while reading the duplicate links of {index!r}: run it again") from exc
    links: dict[tuple[str, str], None] = {}
    missing = self_links = 0
    for a, b in named:
        if a == b:
            self_links += 1
        elif a not in posts or b not in posts:
            missing += 1
        else:
            links[(a, b)] = None
    where = f"index {index}, field {duplicate_field}"
    if not links:
        raise DataError(f"{where}: no usable duplicate link ({len(named)} named, {missing} to a missing post, "
                        f"{self_links} to itself, {bad} not an id); name the field holding the duplicated post's id")
    dump = StackExchangeDump(posts, tuple(links), (), missing, {}, 0, self_links, 0, {})
    report = SourceReport(where, "site-index", len({a for a, _ in links}), len(links), 0, missing_post_links=missing,
                          self_links=self_links, bad_values=bad)
    logger.info("%s", report.line())
    return Supervision("retrieval", dump, report)
