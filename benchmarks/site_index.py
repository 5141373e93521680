"""A site's own index, made the way a Q&A site would with plain opensearch-py: what the operator measurements
(``operator_walkthrough``, ``benchmarks.footprint``, ``benchmarks.freshness``) and the operator tests connect
semdup to. Its own field names (``Title``, ``Body`` as Stack Exchange's HTML, ``Tags``, ``CreationDate``,
``Score``), the default similarity, the posts' numeric ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from semdup.core.posts import Post

__all__ = ["SITE_MAPPING", "site_posts", "site_doc", "bulk_or_raise", "make_site_index", "make_site_alias"]

SITE_MAPPING: dict[str, Any] = {
    "properties": {
        "Title": {"type": "text"},
        "Body": {"type": "text"},  # HTML, as Stack Exchange stores it
        "Tags": {"type": "keyword"},
        "CreationDate": {"type": "date"},
        "Score": {"type": "integer"},
    }
}
_TIMEOUT = 300


def site_posts(data: str | Path | None = None) -> list[Post]:
    """The posts of a Stack Exchange dump (default: the Travel dump) that have both a title and a body, in the
    dump's order: what the measurements' site indices hold and write."""
    from semdup.data.paths import travel_dir
    from semdup.data.stackexchange import load_stackexchange_dump

    return [p for p in load_stackexchange_dump(data or travel_dir()).posts.values() if p.title and p.body]


def site_doc(p: Post, n: int) -> dict[str, Any]:
    """A post as the site stores it (its own field names, the body as HTML); ``n`` varies the date and score."""
    return {
        "Title": p.title,
        "Body": p.body,
        "Tags": ["travel"],
        "CreationDate": f"2015-01-{1 + n % 28:02d}",
        "Score": n,
    }


def bulk_or_raise(client: Any, actions: list[dict[str, Any]]) -> None:
    """semdup's bulk writer; any failed action is an error (these are measurements' fixtures)."""
    from semdup.opensearch_io.bulk import bulk_write

    report = bulk_write(client, actions, chunk_size=200, request_timeout=_TIMEOUT)
    if report.failed:
        raise RuntimeError(f"{len(report.failed)} bulk actions failed: {[str(f) for f in report.failed[:2]]}")


def make_site_index(client: Any, name: str, posts: Sequence[Post]) -> None:
    """One concrete index of the site's, holding ``posts``, refreshed."""
    client.indices.create(index=name, body={"mappings": SITE_MAPPING}, request_timeout=_TIMEOUT)
    bulk_or_raise(client, [{"_index": name, "_id": p.id, "_source": site_doc(p, n)} for n, p in enumerate(posts)])
    client.indices.refresh(index=name)


def make_site_alias(client: Any, alias: str, posts: Sequence[Post]) -> None:
    """Two yearly indices behind the alias the site reads and writes through: ``<alias>-2015`` holds the first
    half of ``posts``, ``<alias>-2016`` the rest and takes the writes."""
    half = len(posts) // 2
    for n, chunk in enumerate((posts[:half], posts[half:])):
        name = f"{alias}-{2015 + n}"
        make_site_index(client, name, chunk)
        client.indices.put_alias(index=name, name=alias, body={"is_write_index": n == 1})
