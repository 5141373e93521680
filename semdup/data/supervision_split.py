"""Split a site's labels into what the encoder learns from and what judges it, so the operator need not.

The unit is a **cluster**: posts joined by labels (duplicate links of a dump, an original question and its
candidates, the pairs that share a post). A whole cluster goes to one side, so no duplicate pair, and no post
of a held-out query, is learned from. The order is **time** when every duplicate link carries a creation date
(a dump's ``PostLinks.xml``): the latest clusters (by their first link) are held out, as the questions the model
will meet next; otherwise a fixed hash of the cluster's smallest post id (the same split on every run).

How many queries are held out: ``share`` of them, but at least ``min_queries`` where the data has them (a paired
test on 50 queries cannot tell a 1-point gain from noise), and never more than ``max_share``.

Example::

    split = split_supervision(load_supervision("/data/travel-stackexchange"))
    split.report.line()   # Travel: "held out by time (first link at or after 2014-12-10T21:18:45.697): 216 of 1080
                          #   queries, 185 of 475 clusters; 864 queries left to learn from"
    dump, name = split.held_out                                # (StackExchangeDump with splits, "dev")
"""

from __future__ import annotations

import logging
import math
import zlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from semdup.core.errors import DataError
from semdup.data.semeval import SemEvalSet
from semdup.data.stackexchange import StackExchangeDump
from semdup.data.supervision import Supervision, clusters

__all__ = ["SplitReport", "LearnSplit", "split_supervision", "held_out_size", "TRAIN", "HELD_OUT"]

logger = logging.getLogger(__name__)

TRAIN, HELD_OUT = "train", "dev"  # the dump's split names, so StackExchangeDump.queries("dev") is the held-out set


@dataclass(frozen=True)
class SplitReport:
    """How the labels were split, with the sizes (printed by the caller)."""

    by: str  # "time", "cluster", or "official" (a bundled set's own published split)
    train_queries: int
    held_out_queries: int
    train_clusters: int
    held_out_clusters: int
    cut: str | None = None  # the first held-out cluster's time, when split by time

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        how = {"time": f"by time (first link at or after {self.cut})", "official": "by the data set's own split"}.get(
            self.by, "by duplicate cluster")
        total_q = self.train_queries + self.held_out_queries
        total_c = self.train_clusters + self.held_out_clusters
        return (f"held out {how}: {self.held_out_queries} of {total_q} queries, {self.held_out_clusters} of "
                f"{total_c} clusters; {self.train_queries} queries left to learn from")


@dataclass(frozen=True)
class LearnSplit:
    """The two sides, each in the form its kind's tools take.

    ``retrieval``: ``(dump, "train")`` / ``(dump, "dev")``, one dump whose ``splits`` mark the sides (every post
    searches the whole corpus either way); ``rerank``: two :class:`SemEvalSet`; ``pairs``: two tuples of pairs.
    """

    kind: str
    train: Any
    held_out: Any
    report: SplitReport


def held_out_size(n_queries: int, share: float, min_queries: int, max_share: float) -> int:
    """Queries to hold out: ``share`` of ``n_queries``, at least ``min_queries``, at most ``max_share`` of them."""
    if not 0 < share <= max_share < 1:
        raise ValueError(f"need 0 < share <= max_share < 1; got share {share}, max_share {max_share}")
    return min(max(math.ceil(share * n_queries), min_queries), math.floor(max_share * n_queries))


def _order(units: list[frozenset[str]], times: dict[frozenset[str], str] | None, salt: str) -> list[frozenset[str]]:
    if times is not None:
        return sorted(units, key=lambda u: (times[u], min(u)))
    return sorted(units, key=lambda u: (zlib.crc32(f"{salt}:{min(u)}".encode()), min(u)))


def _choose(units: list[frozenset[str]], queries_in: dict[frozenset[str], int], target: int) -> set[frozenset[str]]:
    """The last units of ``units`` until they hold ``target`` queries."""
    held: set[frozenset[str]] = set()
    count = 0
    for u in reversed(units):
        if count >= target:
            break
        held.add(u)
        count += queries_in[u]
    return held


def _units(links: Iterable[tuple[str, str]]) -> list[frozenset[str]]:
    return list({c for c in clusters(links).values()})


def _split_dump(dump: StackExchangeDump, share: float, min_queries: int, max_share: float, salt: str) -> LearnSplit:
    units = _units(dump.duplicate_links)
    query_ids = {a for a, _ in dump.duplicate_links}
    of = {pid: u for u in units for pid in u}
    queries_in = {u: sum(1 for pid in u if pid in query_ids) for u in units}
    dated = all(link in dump.link_dates for link in dump.duplicate_links)
    times = None
    if dated:
        times = {}
        for link in dump.duplicate_links:
            u = of[link[0]]
            times[u] = min(times.get(u, dump.link_dates[link]), dump.link_dates[link])
    ordered = _order(units, times, salt)
    held = _choose(ordered, queries_in, held_out_size(len(query_ids), share, min_queries, max_share))
    splits = {pid: (HELD_OUT if u in held else TRAIN) for u in units for pid in u}
    split_dump = StackExchangeDump(dump.posts, dump.duplicate_links, dump.related_links, dump.skipped_links, splits,
                                   dump.skipped_posts, dump.self_links, dump.other_posts, dump.link_dates)
    n_held = sum(queries_in[u] for u in held)
    cut = min((times[u] for u in held), default=None) if times is not None else None
    report = SplitReport("time" if dated else "cluster", len(query_ids) - n_held, n_held, len(units) - len(held),
                         len(held), cut)
    return LearnSplit("retrieval", (split_dump, TRAIN), (split_dump, HELD_OUT), report)


def _split_rerank(sem: SemEvalSet, share: float, min_queries: int, max_share: float, salt: str) -> LearnSplit:
    links = [(q.post.id, r.post.id) for q in sem.questions for r in q.related]
    links += [(q.post.id, q.post.id) for q in sem.questions]
    units = _units(links)
    of = {pid: u for u in units for pid in u}
    informative = {q.post.id for q in sem.questions if any(r.relevant for r in q.related)}
    queries_in = {u: sum(1 for pid in u if pid in informative) for u in units}
    ordered = _order(units, None, salt)
    held = _choose(ordered, queries_in, held_out_size(len(informative), share, min_queries, max_share))
    train = SemEvalSet(f"{sem.name}:train", tuple(q for q in sem.questions if of[q.post.id] not in held))
    dev = SemEvalSet(f"{sem.name}:held-out", tuple(q for q in sem.questions if of[q.post.id] in held))
    n_held = sum(queries_in[u] for u in held)
    report = SplitReport("cluster", len(informative) - n_held, n_held, len(units) - len(held), len(held))
    return LearnSplit("rerank", train, dev, report)


def _split_pairs(pairs: tuple[Any, ...], share: float, min_queries: int, max_share: float, salt: str) -> LearnSplit:
    units = _units((p.query.id, p.candidate.id) for p in pairs)
    of = {pid: u for u in units for pid in u}
    dup_queries = {p.query.id for p in pairs if p.duplicate}
    queries_in = {u: sum(1 for pid in u if pid in dup_queries) for u in units}
    ordered = _order(units, None, salt)
    held = _choose(ordered, queries_in, held_out_size(len(dup_queries), share, min_queries, max_share))
    train = tuple(p for p in pairs if of[p.query.id] not in held)
    dev = tuple(p for p in pairs if of[p.query.id] in held)
    n_held = sum(queries_in[u] for u in held)
    report = SplitReport("cluster", len(dup_queries) - n_held, n_held, len(units) - len(held), len(held))
    return LearnSplit("pairs", train, dev, report)


def split_supervision(sup: Supervision, share: float = 0.2, min_queries: int = 200, max_share: float = 0.3,
                      salt: str = "learn") -> LearnSplit:
    """Split ``sup`` into training and held-out sides (see the module doc); logs the sizes.

    Args:
        sup: the labels (:func:`semdup.data.supervision.load_supervision`).
        share: the share of queries held out, ...
        min_queries: ... but at least this many where the data allows, ...
        max_share: ... and never more than this share.
        salt: the hash's salt when there are no dates (another salt, another split).

    Raises:
        DataError: one side would be empty (too few labelled duplicates to learn from and judge).
    """
    if sup.kind == "retrieval":
        split = _split_dump(sup.data, share, min_queries, max_share, salt)
    elif sup.kind == "rerank":
        split = _split_rerank(sup.data, share, min_queries, max_share, salt)
    else:
        split = _split_pairs(tuple(sup.data), share, min_queries, max_share, salt)
    if split.report.train_queries == 0 or split.report.held_out_queries == 0:
        raise DataError(f"{sup.report.source}: too few labelled duplicates to split ({split.report.line()}); "
                        "a learn run needs queries to learn from and queries to judge on")
    logger.info("%s", split.report.line())
    return split
