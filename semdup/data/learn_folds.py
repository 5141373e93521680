"""Cut a site's labels into K folds, so that every labelled query can be judged by a model that never saw it.

``semdup learn`` fine-tunes one model per fold, each without its fold, and scores every labelled query with the
model that did not train on it (out of fold). Those out-of-fold figures, over every labelled query, are the only
figures it chooses and gates on: hundreds of queries instead of one held-out slice of 50, and no query is ever
judged by a model that learned from it.

The unit is a **cluster**: posts joined by labels (duplicate links of a dump, an original question and its
candidates, the pairs that share a post). A whole cluster goes to one fold, so no duplicate pair, and no post of
a held-out query, is learned from by the model that judges it. Clusters that share no post can still share what
makes future posts unlike past ones (the season, the asker's style, the annotation round), so the folds are cut
by the first field the labels carry that separates them, and the report says which rule was used and why the
ones before it were not:

1. **time**: a dump's duplicate links, when every one carries a date (when the moderator closed the question),
   else its questions' ``CreationDate``: clusters sorted by their first date, cut into K contiguous blocks of
   about equal query counts, never inside a run of equal dates (links stamped at once order nothing);
2. **author**: a dump's ``OwnerUserId``: clusters that share an asker go to one fold together, so no fold model
   has learned from an author whose question it judges;
3. **source**: labels read from several files (SemEval's training parts and dev: successive annotation rounds),
   cut at file boundaries in the order given;
4. **tag**: a dump's first tag, as for authors (a fold model then never saw the topic it judges);
5. else **cluster**: a fixed hash of each cluster's smallest post id (the same folds on every run), cut the same
   way.

A grouping field is used only when it leaves every fold at least half its fair share of queries (one prolific
author or one tag may hold most of a site).

A bundled set's official test side is never among the folds (``exclude``).

Example::

    folds = fold_supervision(load_supervision("/data/travel-stackexchange"), k=2)
    folds.report.line()   # "2 folds by time (link dates; first 2011-06-22, 2014-02-10): 540 + 540 queries, ..."
    for fold in folds.folds:
        fold.train, fold.held          # (dump, "train"), (dump, "dev") for a dump; two SemEvalSets; two tuples
"""

from __future__ import annotations

import itertools
import logging
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
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
        by: ``time``, ``author``, ``source``, ``tag`` or ``cluster`` (the module doc's rules).
        queries: labelled queries per fold.
        clusters: clusters per fold.
        first_times: each fold's first value, when cut in order (time: its first date; source: its first file).
        why_not: why each rule before ``by`` was not used ("" when the first one was).
        excluded_queries: labelled queries of a bundled set's test side, never among the folds.
        field: the field that cut them (``link dates``, ``CreationDate``, ``OwnerUserId``, ``files``, ``Tags``).
        groups: for ``author`` and ``tag``, how many groups of clusters the field made.
    """

    by: str
    queries: tuple[int, ...]
    clusters: tuple[int, ...]
    first_times: tuple[str, ...] = ()
    why_not: str = ""
    excluded_queries: int = 0
    field: str = ""
    groups: int = 0

    @property
    def k(self) -> int:
        return len(self.queries)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def rule(self) -> str:
        """The rule used, in words."""
        if self.by in ("time", "source"):
            first = ", ".join(t[:10] if self.by == "time" else t.split(" ", 1)[-1] for t in self.first_times)
            return f"by {self.by} ({self.field}; first {first})"
        if self.by in ("author", "tag"):
            return f"by {self.by} ({self.field}: {self.groups} groups of clusters, none in two folds)"
        return "by duplicate cluster"

    def line(self) -> str:
        why = f"; {self.why_not}" if self.why_not else ""
        test = f"; {self.excluded_queries} test queries never used" if self.excluded_queries else ""
        return (f"{self.k} folds {self.rule()}: {' + '.join(map(str, self.queries))} = {sum(self.queries)} queries, "
                f"{sum(self.clusters)} clusters{why}{test}")


@dataclass(frozen=True)
class _Field:
    """A field that may cut the folds: ``by`` (the rule), ``name`` (where its values come from), post id ->
    value (``values``; None with ``missing`` saying why the labels cannot use it), ``ordered`` (contiguous blocks
    in value order) or grouped (clusters sharing a value kept together)."""

    by: str
    name: str
    values: Mapping[str, str] | None
    ordered: bool
    missing: str = ""


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
    """K contiguous blocks of ``ordered`` cut only where the value changes, or (None, why) when there are fewer
    distinct values than folds (links stamped at once do not order anything)."""
    runs: list[list[frozenset[str]]] = []
    for u in ordered:
        if runs and times[runs[-1][-1]] == times[u]:
            runs[-1].append(u)
        else:
            runs.append([u])
    distinct = len(runs)
    if distinct < k:
        return None, f"{distinct} distinct value(s) for {len(ordered)} clusters"
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


def _hashed(items: Sequence[frozenset[str]], salt: str) -> list[frozenset[str]]:
    return sorted(items, key=lambda u: (zlib.crc32(f"{salt}:{min(u)}".encode()), min(u)))


def _by_order(units: Sequence[frozenset[str]], queries_in: Mapping[frozenset[str], int], k: int,
              values: Mapping[str, str]) -> tuple[list[list[frozenset[str]]] | None, str]:
    """Clusters sorted by their first value, cut into contiguous blocks (or None, why)."""
    first = {u: min((values[p] for p in u if p in values), default=None) for u in units}
    bare = sum(1 for v in first.values() if v is None)
    if bare:
        return None, f"{bare} of {len(units)} clusters carry none"
    times = {u: str(v) for u, v in first.items()}
    return _times_separate(sorted(units, key=lambda u: (times[u], min(u))), times, queries_in, k)


def _by_group(units: Sequence[frozenset[str]], queries_in: Mapping[frozenset[str], int], k: int,
              values: Mapping[str, str], salt: str) -> tuple[list[list[frozenset[str]]] | None, str, int]:
    """Clusters that share a value joined into one group, groups cut by hash (or None, why); and the group count."""
    held = {u: {values[p] for p in u if p in values} for u in units}
    bare = sum(1 for v in held.values() if not v)
    if bare:
        return None, f"{bare} of {len(units)} clusters carry none", 0
    tag_of = {f"value:{v}": v for vs in held.values() for v in vs}
    joined = clusters([(f"value:{v}", min(u)) for u in units for v in held[u]])  # clusters and values, linked
    by_root: dict[frozenset[str], list[frozenset[str]]] = {}
    for u in units:
        by_root.setdefault(joined[min(u)], []).append(u)
    groups = list(by_root.values())
    if len(groups) < k:
        return None, f"its {len(tag_of)} value(s) join the clusters into {len(groups)} group(s)", len(groups)
    keyed = {frozenset(p for u in g for p in u): g for g in groups}
    order = _hashed(list(keyed), salt)
    weights = [sum(queries_in[u] for u in keyed[g]) for g in order]
    blocks = _cut(weights, k)
    sizes = [sum(weights[a:b]) for a, b in blocks]
    total = sum(weights)
    if min(sizes) * 2 * k < total:
        return None, (f"the largest of its {len(groups)} groups holds {max(weights)} of {total} queries: folds of "
                      f"{' + '.join(map(str, sizes))}"), len(groups)
    return [[u for g in order[a:b] for u in keyed[g]] for a, b in blocks], "", len(groups)


def _assign(links: Iterable[tuple[str, str]], judged: Mapping[str, int], k: int, salt: str,
            fields: Sequence[_Field] = ()) -> tuple[list[list[frozenset[str]]], FoldReport]:
    """Clusters of ``links`` cut into K folds by the first of ``fields`` that separates them, else by hash;
    balanced by the judged items of each cluster (``judged``: post id -> items keyed at it: 1 per query, or its
    pairs)."""
    units = list({c for c in clusters(links).values()})
    queries_in = {u: sum(judged.get(pid, 0) for pid in u) for u in units}
    units = [u for u in units if queries_in[u]]  # a cluster with no labelled query judges nothing
    if sum(queries_in[u] for u in units) < k:
        raise DataError(f"{sum(queries_in[u] for u in units)} labelled queries cannot fill {k} folds; a learn run "
                        "needs at least one query per fold (give more duplicate links)")
    whys: list[str] = []

    def report(by: str, folds: list[list[frozenset[str]]], **kw: Any) -> FoldReport:
        return FoldReport(by, tuple(sum(queries_in[u] for u in f) for f in folds), tuple(len(f) for f in folds),
                          why_not="; ".join(whys), **kw)

    for fld in fields:
        if fld.values is None:
            whys.append(f"not by {fld.by} ({fld.name}): {fld.missing}")
            continue
        if fld.ordered:
            folds, why = _by_order(units, queries_in, k, fld.values)
            if folds is not None:
                firsts = tuple(min(fld.values[p] for u in f for p in u if p in fld.values) for f in folds)
                return folds, report(fld.by, folds, first_times=firsts, field=fld.name)
        else:
            folds, why, n = _by_group(units, queries_in, k, fld.values, salt)
            if folds is not None:
                return folds, report(fld.by, folds, field=fld.name, groups=n)
        whys.append(f"not by {fld.by} ({fld.name}): {why}")
    ordered = _hashed(units, salt)
    folds = [ordered[a:b] for a, b in _cut([queries_in[u] for u in ordered], k)]
    return folds, report("cluster", folds)


def _dump_side(dump: StackExchangeDump, splits: dict[str, str]) -> StackExchangeDump:
    return StackExchangeDump(dump.posts, dump.duplicate_links, dump.related_links, dump.skipped_links, splits,
                             dump.skipped_posts, dump.self_links, dump.other_posts, dump.link_dates, dump.post_fields)


def _dump_fields(dump: StackExchangeDump, links: Sequence[tuple[str, str]]) -> list[_Field]:
    """The dump's fields in the module doc's order: link dates, question dates, askers, first tags."""
    out = []
    undated = sum(1 for link in links if link not in dump.link_dates)
    link_times: dict[str, str] = {}
    for link in links:
        if link in dump.link_dates:
            link_times[link[0]] = min(link_times.get(link[0], dump.link_dates[link]), dump.link_dates[link])
    out.append(_Field("time", "link dates", None if undated else link_times, True,
                      f"{undated} of {len(links)} duplicate links carry no date"))
    for by, name, ordered in (("time", "CreationDate", True), ("author", "OwnerUserId", False),
                              ("tag", "Tags", False)):
        values = dict(dump.post_fields.get(name, {}))
        if name == "Tags":
            values = {p: _first_tag(v) for p, v in values.items() if _first_tag(v)}
        out.append(_Field(by, name, values or None, ordered, "the questions carry no " + name))
    return out


def _first_tag(tags: str) -> str:
    """The first tag of a dump's ``Tags`` attribute (``<visas><schengen>`` or ``|visas|schengen|``)."""
    for part in tags.replace("|", "<").replace(">", "<").split("<"):
        if part.strip():
            return part.strip()
    return ""


def _fold_dump(dump: StackExchangeDump, k: int, exclude: frozenset[str], salt: str) -> LearnFolds:
    links = [link for link in dump.duplicate_links if not (set(link) & exclude)]
    excluded_queries = len({a for a, b in dump.duplicate_links if {a, b} & exclude})
    folds, report = _assign(links, dict.fromkeys((a for a, _ in links), 1), k, salt, _dump_fields(dump, links))
    everything = _dump_side(dump, {pid: TRAIN for f in folds for u in f for pid in u})
    out = []
    for i, f in enumerate(folds):
        mine = {pid for u in f for pid in u}
        side = _dump_side(dump, {pid: HELD_OUT if pid in mine else TRAIN for pid in everything.splits})
        out.append(Fold(i, (side, TRAIN), (side, HELD_OUT), tuple(q.post.id for q in side.queries(HELD_OUT))))
    return LearnFolds("retrieval", (everything, TRAIN), tuple(out), replace(report, excluded_queries=excluded_queries))


def _source_field(sources: Sequence[tuple[str, frozenset[str]]]) -> _Field:
    if len(sources) < 2:
        return _Field("source", "files", None, True, "the labels come from one file")
    width = len(str(len(sources)))
    return _Field("source", "files in the order given",
                  {pid: f"{i:0{width}d} {name}" for i, (name, ids) in enumerate(sources) for pid in ids}, True)


def _fold_rerank(sem: SemEvalSet, k: int, salt: str, sources: Sequence[tuple[str, frozenset[str]]] = ()
                 ) -> LearnFolds:
    links = [(q.post.id, r.post.id) for q in sem.questions for r in q.related]
    links += [(q.post.id, q.post.id) for q in sem.questions]
    informative = {q.post.id: 1 for q in sem.questions if any(r.relevant for r in q.related)}
    folds, report = _assign(links, informative, k, salt, [_source_field(sources)])
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
    folds, report = _assign(links, judged, k, salt, [
        _Field("time", "dates", None, True, "labelled pairs carry no date, author, tag or source")])
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
        folds = _fold_rerank(sup.data, k, salt, sup.sources)
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
