"""``semdup learn --duplicate-field``: duplicate links read from an index the site made, against a real OpenSearch.

The site's index is made with plain opensearch-py, the way a Q&A site would: its own field names (``Title``,
``Body``), two indices behind the alias it reads through, and a ``DuplicateOf`` field it keeps only in ``_source``
(an id, a list of ids, or junk a site may hold). The posts and links are real Travel Stack Exchange ones.
"""

from __future__ import annotations

from typing import Any

import pytest
from opensearchpy.helpers import bulk

from semdup.core.errors import DataError, SearchIndexError
from semdup.data import load_stackexchange_dump
from semdup.data.paths import travel_dir
from semdup.data.learn_folds import fold_supervision
from semdup.index_format.site_links import site_supervision

pytestmark = pytest.mark.opensearch

N_LINKS = 40

MAPPING = {"properties": {"Title": {"type": "text"}, "Body": {"type": "text"},
                          "DuplicateOf": {"type": "object", "enabled": False}}}


@pytest.fixture
def site(opensearch_client: Any, unique_index: str) -> Any:
    yield unique_index
    opensearch_client.indices.delete(index=f"{unique_index}*", ignore_unavailable=True, request_timeout=30)


def test_links_are_read_through_the_sites_alias_and_bad_ones_counted(opensearch_client: Any, site: str) -> None:
    dump = load_stackexchange_dump(travel_dir())
    links = list(dump.duplicate_links[:N_LINKS])
    targets: dict[str, list[str]] = {}
    for a, b in links:
        targets.setdefault(a, []).append(b)
    ids = sorted({pid for link in links for pid in link})
    docs: dict[str, dict[str, Any]] = {}
    for pid in ids:
        p = dump.posts[pid]
        doc: dict[str, Any] = {"Title": p.title, "Body": p.body}
        if pid in targets:  # one id as a number, several as a list, as sites do
            t = targets[pid]
            doc["DuplicateOf"] = int(t[0]) if len(t) == 1 else t
        docs[pid] = doc
    extra = [pid for pid in dump.posts if pid not in docs][:4]
    for pid, value in zip(extra, ["99999999", pid_self := extra[1], {"id": 3}, ""], strict=True):
        docs[pid] = {"Title": dump.posts[pid].title, "Body": dump.posts[pid].body, "DuplicateOf": value}
    assert pid_self == extra[1]
    names = [f"{site}-2015", f"{site}-2016"]
    for name in names:
        opensearch_client.indices.create(index=name, body={"mappings": MAPPING}, request_timeout=30)
    actions = [{"_index": names[n % 2], "_id": pid, "_source": doc} for n, (pid, doc) in enumerate(docs.items())]
    bulk(opensearch_client, actions, refresh=True, request_timeout=60)
    for name in names:
        opensearch_client.indices.put_alias(index=name, name=site, request_timeout=30)
    before = sorted(opensearch_client.indices.get(index=f"{site}*"))

    sup = site_supervision(opensearch_client, site, "DuplicateOf", title_field="Title", body_field="Body")

    assert sup.kind == "retrieval"
    assert sorted(sup.data.duplicate_links) == sorted(set(links))
    r = sup.report
    assert (r.duplicate_links, r.missing_post_links, r.self_links, r.bad_values) == (len(set(links)), 1, 1, 2)
    assert r.queries == len(targets) and "1 missing post, 1 self, 2 not an id" in r.line()
    assert set(sup.data.posts) == set(docs)
    some = links[0][0]
    assert sup.data.posts[some].title == dump.posts[some].title and sup.data.posts[some].body == dump.posts[some].body
    assert sorted(opensearch_client.indices.get(index=f"{site}*")) == before  # only read: nothing created
    folds = fold_supervision(sup, 2)
    assert folds.report.by == "cluster" and min(folds.report.queries) > 0  # no link dates in an index: clusters

    with pytest.raises(DataError, match="no usable duplicate link"):
        site_supervision(opensearch_client, site, "Nothing", title_field="Title", body_field="Body")
    with pytest.raises(SearchIndexError, match="no index or alias"):
        site_supervision(opensearch_client, f"{site}-absent", "DuplicateOf")
