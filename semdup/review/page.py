"""The review page's content: one page of flagged pairs with both posts, the reviewer's verdicts, the chart.

Everything here is data for the template (strings, numbers, ``(text, marked)`` segments); the template escapes all
of it. The posts are read as the index holds them now (:func:`semdup.alerts.flag.read_posts`: the site's index
for one connected by ``semdup enable``), so an edited post shows its new text beside the flag's old score, and a
deleted one shows as gone.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain, islice
from typing import Any
from urllib.parse import quote, urlencode

from semdup.alerts.flag import read_posts
from semdup.alerts.store import Flag, flag_id
from semdup.core.posts import Post
from semdup.index_format.companion import companion_of
from semdup.review.chart import Chart, chart
from semdup.review.context import ReviewContext
from semdup.review.queue import FlagPage, flag_page
from semdup.review.render import ShownPost, shared_terms, show_post
from semdup.review.verdicts import DUPLICATE, iter_verdicts, judged_pairs, verdicts_of_pairs
from semdup.service.settings import ApiKey

__all__ = ["Filters", "PairView", "page_view", "post_url", "MAX_CHART_VERDICTS"]

MAX_CHART_VERDICTS = 20_000  # the chart reads at most this many verdicts per page load


@dataclass(frozen=True)
class Filters:
    """What the reviewer asked for: one index (None: all theirs), a minimum probability, a page."""

    index: str | None = None
    min_probability: float | None = None
    page: int = 1
    size: int = 20

    def query(self, **changes: Any) -> str:
        """The page's query string with ``changes`` (for the pager and the filter form)."""
        values = {"index": self.index, "min_probability": self.min_probability, "page": self.page, "size": self.size}
        values.update(changes)
        return urlencode({k: v for k, v in values.items() if v not in (None, "")})


@dataclass(frozen=True)
class PairView:
    """One flagged pair as shown: the flag, both posts, this reviewer's verdict and everyone's counts."""

    n: int
    flag: Flag
    post: ShownPost
    candidate: ShownPost
    mine: str | None
    duplicate_votes: int
    other_votes: int


def post_url(template: str | None, index: str, post_id: str) -> str | None:
    """The post's page on the site (``SEMDUP_POST_URL``), the id and index percent-encoded; None without one."""
    if template is None:
        return None
    return template.format(id=quote(post_id, safe=""), index=quote(index, safe=""))


def _posts(ctx: ReviewContext, flags: list[Flag]) -> tuple[dict[tuple[str, str], Post], set[str]]:
    """The flagged posts by (index, id), and the indices whose text is the site's HTML (connected ones)."""
    wanted: dict[str, list[str]] = {}
    for f in flags:
        wanted.setdefault(f.index, []).extend((f.post_id, f.candidate_id))
    out: dict[tuple[str, str], Post] = {}
    html: set[str] = set()
    for index, ids in wanted.items():
        found, _ = read_posts(ctx.client, index, list(dict.fromkeys(ids)))
        out.update({(index, p.id): p for p in found})
        if companion_of(ctx.client, index) is not None:
            html.add(index)
    return out, html


def _chart(ctx: ReviewContext, indices: tuple[str, ...]) -> tuple[Chart | None, float | None, int]:
    """The chart over the verdicts on flags of the service's model (another model's scores are on another scale),
    the threshold it marks, and how many judged pairs it leaves out for that reason."""
    verdicts = chain.from_iterable(iter_verdicts(ctx.client, i, store=ctx.verdicts_store) for i in indices)
    judged, _ = judged_pairs(islice(verdicts, MAX_CHART_VERDICTS))
    same = [p for p in judged if ctx.model is None or p.model == ctx.model]
    threshold = ctx.threshold()
    return chart([p.score for p in same], [p.duplicate for p in same], threshold), threshold, len(judged) - len(same)


def page_view(ctx: ReviewContext, key: ApiKey, filters: Filters) -> dict[str, Any]:
    """The template's values for ``key``'s reviewer at ``filters``.

    Raises:
        LookupError: ``filters.index`` is not one this key may review (the caller answers 404).
        ConfigError: filters out of range. OpenSearchUnavailable: the cluster did not answer.
    """
    allowed = ctx.settings.review_indices(key)
    if filters.index is not None and filters.index not in allowed:
        raise LookupError(filters.index)
    indices = (filters.index,) if filters.index is not None else allowed
    fp: FlagPage = flag_page(
        ctx.client,
        indices,
        min_probability=filters.min_probability,
        page=filters.page,
        size=filters.size,
        store=ctx.flags_store,
    )
    posts, html = _posts(ctx, fp.flags)
    pair_ids = [flag_id(f.index, f.post_id, f.candidate_id) for f in fp.flags]
    votes = verdicts_of_pairs(ctx.client, pair_ids, store=ctx.verdicts_store)
    pairs = []
    for n, f in enumerate(fp.flags):
        a, b = posts.get((f.index, f.post_id)), posts.get((f.index, f.candidate_id))
        terms = shared_terms(ctx.pipeline, a, b) if a is not None and b is not None else frozenset()
        url = ctx.settings.review.post_url
        vs = votes.get(flag_id(f.index, f.post_id, f.candidate_id), [])
        pairs.append(
            PairView(
                n=n,
                flag=f,
                post=show_post(ctx.pipeline, a, f.post_id, terms, post_url(url, f.index, f.post_id), f.index in html),
                candidate=show_post(
                    ctx.pipeline, b, f.candidate_id, terms, post_url(url, f.index, f.candidate_id), f.index in html
                ),
                mine=next((v.verdict for v in vs if v.who == key.who), None),
                duplicate_votes=sum(v.verdict == DUPLICATE for v in vs),
                other_votes=sum(v.verdict != DUPLICATE for v in vs),
            )
        )
    graph, threshold, other_model = _chart(ctx, indices)
    return {
        "who": key.who,
        "indices": allowed,
        "filters": filters,
        "pairs": pairs,
        "total": fp.total,
        "pages": fp.pages,
        "prev_query": filters.query(page=filters.page - 1) if filters.page > 1 else None,
        "next_query": filters.query(page=filters.page + 1) if filters.page < fp.pages else None,
        "chart": graph,
        "threshold": threshold,
        "other_model": other_model,
        "model": ctx.model,
    }
