"""Cut a site's labels into K folds, so that every labelled query can be judged by a model that never saw it.

``semdup learn`` fine-tunes one model per fold, each without its fold, and scores every labelled query with the
model that did not train on it (out of fold). Those out-of-fold figures, over every labelled query, are the only
figures it chooses and gates on: hundreds of queries instead of one held-out slice of 50, and no query is ever
judged by a model that learned from it.

The unit is a **cluster**: posts joined by labels (duplicate links of a dump, an original question and its
candidates, the pairs that share a post). A whole cluster goes to one fold, so no duplicate pair, and no post of
a held-out query, is learned from by the model that judges it. The order:

* **time**, when every duplicate link carries a date and the dates separate the folds: clusters sorted by their
  first link, cut into K contiguous blocks of about equal query counts, never inside a run of equal dates;
* else **cluster**: a fixed hash of each cluster's smallest post id (the same folds on every run), cut the same
  way. Links that all carry one date (an export that stamped them at once) do not separate anything, so they
  fall back to this rule, and the report says why.

A bundled set's official test side is never among the folds (``exclude``).

Example::

    folds = fold_supervision(load_supervision("/data/travel-stackexchange"), k=2)
    folds.report.line()   # "2 folds by time (first links 2011-06-22…, 2014-02-10…): 540 + 540 queries, ..."
    for fold in folds.folds:
        fold.train, fold.held          # (dump, "train"), (dump, "dev") for a dump; two SemEvalSets; two tuples
"""

from __future__ import annotations

import itertools
import logging
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from semdup.core.errors import DataError
from semdup.data.semeval import SemEvalSet
from semdup.data.stackexchange import StackExchangeDump
from semdup.data.supervision import Supervision, clusters

__all__ = ["FoldReport", "Fold", "LearnFolds", "fold_supervision", "side_post_ids", "check_out_of_fold", "TRAIN",
           "HELD_OUT"]

logger = logging.getLogger(__name__)

TRAIN, HELD_OUT = "train", "dev"  # a dump's split names, so StackExchangeDump.queries("dev") is a fold's held side


@dataclass(frozen=True)
class FoldReport:
    """How the labels were cut (printed by the caller, recorded in the bundle's manifest).

    Attributes:
        by: ``time`` or ``cluster``.
        queries: labelled queries per fold.
        clusters: clusters per fold.
        first_times: each fold's first link time, when cut by time.
        why_not_time: why dated links were not cut by time (None when they were, or carry no dates).
        excluded_queries: labelled queries of a bundled set's test side, never among the folds.
    """

    by: str
    queries: tuple[int, ...]
    clusters: tuple[int, ...]
    first_times: tuple[str, ...] = ()
    why_not_time: str | None = None
    excluded_queries: int = 0

    @property
    def k(self) -> int:
        return len(self.queries)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        how = "by time (first links " + ", ".join(t[:10] for t in self.first_times) + ")" if self.by == "time" \
            else "by duplicate cluster"
        why = f"; not by time: {self.why_not_time}" if self.why_not_time else ""
        test = f"; {self.excluded_queries} test queries never used" if self.excluded_queries else ""
        return (f"{self.k} folds {how}: {' + '.join(map(str, self.queries))} = {sum(self.queries)} queries, "
                f"{sum(self.clusters)} clusters{why}{test}")


@dataclass(frozen=True)
class Fold:
    """One fold: the side its model trains on, the side it judges, and the judged queries' keys.

    ``held_keys``: the key of each held-out query as the out-of-fold figures name it: the query's post id, or for
    pairs the pair's index in :attr:`LearnFolds.labelled` (a pair has no id of its own).
    """

    index: int
    train: Any
    held: Any
    held_keys: tuple[str, ...]


@dataclass(frozen=True)
class LearnFolds:
    """Every labelled query (``labelled``: what the final model trains on and the out-of-fold figures cover),
    the folds, and the report. Sides take each kind's form: ``(dump, split)`` for ``retrieval``, a
    :class:`SemEvalSet` for ``rerank``, a tuple of pairs for ``pairs``."""

    kind: str
    labelled: Any
    folds: tuple[Fold, ...]
    report: FoldReport

    @property
    def k(self) -> int:
        return len(self.folds)


def _times_separate(ordered: Sequence[frozenset[str]], times: Mapping[frozenset[str], str],
                    queries_in: Mapping[frozenset[str], int], k: int) -> tuple[list[list[frozenset[str]]] | None, str]:
    """K contiguous blocks of ``ordered`` cut only where the time changes, or (None, why) when the dates have
    fewer distinct values than folds (links stamped at once do not order anything)."""
    runs: list[list[frozenset[str]]] = []
    for u in ordered:
        if runs and times[runs[-1][-1]] == times[u]:
            runs[-1].append(u)
        else:
            runs.append([u])
    distinct = len(runs)
    if distinct < k:
        return None, f"the links carry {distinct} distinct date(s) for {len(ordered)} clusters"
    blocks = _cut([sum(queries_in[u] for u in run) for run in runs], k)
    return [[u for run in runs[a:b] for u in run] for a, b in blocks], ""


def _cut(weights: Sequence[int], k: int) -> list[tuple[int, int]]:
    """[start, end) of K contiguous non-empty blocks of ``weights``, each cut where the running sum comes
    closest to its fair share (j/K of the total), so one heavy cluster cannot starve the blocks after it."""
    prefix = list(itertools.accumulate(weights))
    total, n = prefix[-1], len(weights)
    cuts, last = [], 0
    for j in range(1, k):
        lo, hi = last + 1, n - (k - j)  # a cut after position c leaves room for the blocks still to come
        c = min(range(lo, hi + 1), key=lambda c: (abs(prefix[c - 1] * k - total * j), c))
        cuts.append(c)
        last = c
    bounds = [0, *cuts, n]
    return [(bounds[i], bounds[i + 1]) for i in range(k)]


def _assign(links: Iterable[tuple[str, str]], judged: Mapping[str, int], k: int, salt: str,
            dates: Mapping[tuple[str, str], str] | None, dup_links: Sequence[tuple[str, str]] = ()
            ) -> tuple[list[list[frozenset[str]]], FoldReport]:
    """Clusters of ``links`` cut into K folds by time (``dates`` of ``dup_links``) or by hash, balanced by the
    judged items of each cluster (``judged``: post id -> items keyed at it: 1 per query, or its pairs)."""
    units = list({c for c in clusters(links).values()})
    queries_in = {u: sum(judged.get(pid, 0) for pid in u) for u in units}
    units = [u for u in units if queries_in[u]]  # a cluster with no labelled query judges nothing
    if sum(queries_in[u] for u in units) < k:
        raise DataError(f"{sum(queries_in[u] for u in units)} labelled queries cannot fill {k} folds; a learn run "
                        "needs at least one query per fold (give more duplicate links)")
    why = None
    if dates is not None and dup_links and all(link in dates for link in dup_links):
        of = {pid: u for u in units for pid in u}
        times: dict[frozenset[str], str] = {}
        for link in dup_links:
            u = of.get(link[0])
            if u is not None:
                times[u] = min(times.get(u, dates[link]), dates[link])
        ordered = sorted(units, key=lambda u: (times[u], min(u)))
        folds, why = _times_separate(ordered, times, queries_in, k)
        if folds is not None:
            return folds, FoldReport("time", tuple(sum(queries_in[u] for u in f) for f in folds),
                                     tuple(len(f) for f in folds), tuple(min(times[u] for u in f) for f in folds))
    ordered = sorted(units, key=lambda u: (zlib.crc32(f"{salt}:{min(u)}".encode()), min(u)))
    folds = [ordered[a:b] for a, b in _cut([queries_in[u] for u in ordered], k)]
    return folds, FoldReport("cluster", tuple(sum(queries_in[u] for u in f) for f in folds),
                             tuple(len(f) for f in folds), (), why or None)


def _dump_side(dump: StackExchangeDump, splits: dict[str, str]) -> StackExchangeDump:
    return StackExchangeDump(dump.posts, dump.duplicate_links, dump.related_links, dump.skipped_links, splits,
                             dump.skipped_posts, dump.self_links, dump.other_posts, dump.link_dates)


def _fold_dump(dump: StackExchangeDump, k: int, exclude: frozenset[str], salt: str) -> LearnFolds:
    links = [link for link in dump.duplicate_links if not (set(link) & exclude)]
    excluded_queries = len({a for a, b in dump.duplicate_links if {a, b} & exclude})
    folds, report = _assign(links, dict.fromkeys((a for a, _ in links), 1), k, salt, dump.link_dates, links)
    everything = _dump_side(dump, {pid: TRAIN for f in folds for u in f for pid in u})
    out = []
    for i, f in enumerate(folds):
        mine = {pid for u in f for pid in u}
        side = _dump_side(dump, {pid: HELD_OUT if pid in mine else TRAIN for pid in everything.splits})
        out.append(Fold(i, (side, TRAIN), (side, HELD_OUT), tuple(q.post.id for q in side.queries(HELD_OUT))))
    report = FoldReport(report.by, report.queries, report.clusters, report.first_times, report.why_not_time,
                        excluded_queries)
    return LearnFolds("retrieval", (everything, TRAIN), tuple(out), report)


def _fold_rerank(sem: SemEvalSet, k: int, salt: str) -> LearnFolds:
    links = [(q.post.id, r.post.id) for q in sem.questions for r in q.related]
    links += [(q.post.id, q.post.id) for q in sem.questions]
    informative = {q.post.id: 1 for q in sem.questions if any(r.relevant for r in q.related)}
    folds, report = _assign(links, informative, k, salt, None)
    of = {pid: i for i, f in enumerate(folds) for u in f for pid in u}
    kept = SemEvalSet(sem.name, tuple(q for q in sem.questions if q.post.id in of))
    out = []
    for i in range(k):
        held = SemEvalSet(f"{sem.name}:fold{i}", tuple(q for q in kept.questions if of[q.post.id] == i))
        train = SemEvalSet(f"{sem.name}:without-fold{i}", tuple(q for q in kept.questions if of[q.post.id] != i))
        out.append(Fold(i, train, held, tuple(q.post.id for q in held.questions)))
    return LearnFolds("rerank", kept, tuple(out), report)


def _fold_pairs(pairs: tuple[Any, ...], k: int, salt: str) -> LearnFolds:
    links = [(p.query.id, p.candidate.id) for p in pairs]
    judged: dict[str, int] = {}
    for p in pairs:  # every pair is judged (classified), duplicate or not
        judged[p.query.id] = judged.get(p.query.id, 0) + 1
    folds, report = _assign(links, judged, k, salt, None)
    of = {pid: i for i, f in enumerate(folds) for u in f for pid in u}
    kept = tuple(pairs)
    out = []
    for i in range(k):
        idx = [j for j, p in enumerate(kept) if of[p.query.id] == i]
        out.append(Fold(i, tuple(p for p in kept if of[p.query.id] != i), tuple(kept[j] for j in idx),
                        tuple(str(j) for j in idx)))
    return LearnFolds("pairs", kept, tuple(out), report)


def fold_supervision(sup: Supervision, k: int, exclude: Iterable[str] = (), salt: str = "learn") -> LearnFolds:
    """Cut ``sup`` into ``k`` folds (see the module doc); logs the report.

    Args:
        sup: the labels (:func:`semdup.data.supervision.load_supervision`).
        k: folds, 2 or more.
        exclude: post ids never to use (a bundled set's test side); their clusters are left out.
        salt: the hash's salt when cut by cluster (another salt, other folds).

    Raises:
        DataError: fewer labelled queries than folds.
        ValueError: ``k`` < 2.
    """
    if k < 2:
        raise ValueError(f"out-of-fold learning needs at least 2 folds; got {k}")
    if sup.kind == "retrieval":
        folds = _fold_dump(sup.data, k, frozenset(exclude), salt)
    elif sup.kind == "rerank":
        folds = _fold_rerank(sup.data, k, salt)
    else:
        folds = _fold_pairs(tuple(sup.data), k, salt)
    check_out_of_fold(folds)
    logger.info("%s", folds.report.line())
    return folds


def side_post_ids(kind: str, side: Any) -> set[str]:
    """Every post id a side holds: what a model trained on it has seen, or what judging it reads."""
    if kind == "retrieval":
        dump, split = side
        return {pid for pid, s in dump.splits.items() if s == split}
    if kind == "rerank":
        return {pid for q in side.questions for pid in (q.post.id, *(r.post.id for r in q.related))}
    return {pid for p in side for pid in (p.query.id, p.candidate.id)}


def check_out_of_fold(folds: LearnFolds) -> None:
    """Refuse folds in which a model would judge a post it trained on, or a query judged twice or never.

    Raises:
        DataError: a held-out post is on the same fold's training side, or a query key is held out by more than
            one fold.
    """
    seen: dict[str, int] = {}
    for f in folds.folds:
        shared = side_post_ids(folds.kind, f.train) & side_post_ids(folds.kind, f.held)
        if shared:
            raise DataError(f"fold {f.index} would judge {len(shared)} post(s) its model trains on (e.g. "
                            f"{sorted(shared)[0]}); out-of-fold figures must come from a model that never saw the "
                            "query")
        for key in f.held_keys:
            if key in seen:
                raise DataError(f"query {key} is held out by folds {seen[key]} and {f.index}; each labelled query "
                                "must be judged by exactly one model")
            seen[key] = f.index
