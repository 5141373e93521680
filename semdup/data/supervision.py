"""A site's own duplicate labels, read for learning: a Stack Exchange dump, SemEval XML, JSONL pairs or groups.

Every source becomes a :class:`Supervision`: one of three kinds, each with the evaluation protocol it supports,
and a :class:`SourceReport` that counts what was read, kept and left out, and why. Nothing is guessed: a link
naming a post that is not there, a post linked to itself or a pair labelled both ways is counted and left out.

=============  ==============================================  ==================================================
kind           source                                          held-out protocol
=============  ==============================================  ==================================================
``retrieval``  a dump: ``Posts.xml`` + ``PostLinks.xml``        each query ranks every post (its duplicates
               (LinkTypeId 3 = duplicate, 1 = related, used    relevant; MAP over the top 100)
               as hard negatives)
``rerank``     SemEval XML (or its pairs JSONL), or a JSONL    each query ranks its own labelled candidates
               of groups ``{"query", "duplicates",             (SemEval's MAP)
               "non_duplicates"}``
``pairs``      a JSONL of labelled pairs                       each pair classified (accuracy)
=============  ==============================================  ==================================================

Example::

    sup = load_supervision("/data/travel-stackexchange")
    sup.kind, sup.report.duplicate_links, sup.report.missing_post_links     # Travel: ("retrieval", 1142, 830)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from semdup.core.errors import DataError
from semdup.core.posts import Post
from semdup.data.pairs import PostPair, load_pairs_jsonl
from semdup.data.reading import iter_jsonl
from semdup.data.semeval import OriginalQuestion, RelatedQuestion, SemEvalSet, load_semeval_pairs_jsonl
from semdup.data.stackexchange import StackExchangeDump, load_stackexchange_dump

__all__ = ["KINDS", "SourceReport", "Supervision", "clusters", "supervision_from_dump", "supervision_from_semeval",
           "supervision_from_pairs", "supervision_from_groups", "load_supervision"]

logger = logging.getLogger(__name__)

KINDS = ("retrieval", "rerank", "pairs")
_GROUP_FORMAT = ('one JSON object per line: {"query": {id, title, body}, "duplicates": [posts], '
                 '"non_duplicates": [posts]}')


@dataclass(frozen=True)
class SourceReport:
    """What a source held and what was kept.

    Attributes:
        source: the file or folder read.
        format: ``stackexchange-dump``, ``semeval-xml``, ``semeval-pairs-jsonl``, ``pairs-jsonl``, ``groups-jsonl``.
        queries: queries with at least one labelled duplicate (what can train and be evaluated).
        duplicate_links: duplicate pairs kept.
        non_duplicate_links: labelled non-duplicate pairs kept (hard negatives).
        missing_post_links: links naming a post the source does not hold (left out).
        self_links: links from a post to itself (left out).
        conflicting: pairs labelled duplicate and non-duplicate both (left out of both).
        unlabelled: candidates without a label (left out).
        dated_links: duplicate links with a creation time (a split by time needs them all).
        bad_values: link values that name no post id (an object, an empty string; left out).
    """

    source: str
    format: str
    queries: int
    duplicate_links: int
    non_duplicate_links: int
    missing_post_links: int = 0
    self_links: int = 0
    conflicting: int = 0
    unlabelled: int = 0
    dated_links: int = 0
    bad_values: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        left = {k: v for k, v in (("missing post", self.missing_post_links), ("self", self.self_links),
                                  ("conflicting", self.conflicting), ("unlabelled", self.unlabelled),
                                  ("not an id", self.bad_values)) if v}
        out = ", ".join(f"{v} {k}" for k, v in left.items()) or "none"
        return (f"{self.source} ({self.format}): {self.queries} queries, {self.duplicate_links} duplicate and "
                f"{self.non_duplicate_links} non-duplicate links kept; left out: {out}; "
                f"{self.dated_links} duplicate links dated")


@dataclass(frozen=True)
class Supervision:
    """Labels of one kind (see the module doc) and the report of how they were read.

    Attributes:
        kind: ``retrieval``, ``rerank`` or ``pairs``.
        data: a :class:`StackExchangeDump` (retrieval; its ``splits`` mark what is held out), a :class:`SemEvalSet`
            (rerank) or a tuple of :class:`PostPair` (pairs).
        report: the source's counts.
        sources: for labels read from several files, each file's name and the ids of the queries it holds, in the
            order given (a field that may separate later labels from earlier ones); empty otherwise.
    """

    kind: str
    data: Any
    report: SourceReport
    extra_posts: tuple[Post, ...] = field(default=(), repr=False)
    sources: tuple[tuple[str, frozenset[str]], ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown supervision kind {self.kind!r}; accepted: {', '.join(KINDS)}")

    def posts(self) -> list[Post]:
        """Every post the labels name (for the IDF vocabulary of a fit), first occurrence kept."""
        out: dict[str, Post] = {}
        if self.kind == "retrieval":
            out.update(self.data.posts)
        elif self.kind == "rerank":
            for q in self.data.questions:
                out.setdefault(q.post.id, q.post)
                for r in q.related:
                    out.setdefault(r.post.id, r.post)
        else:
            for p in self.data:
                out.setdefault(p.query.id, p.query)
                out.setdefault(p.candidate.id, p.candidate)
        for p in self.extra_posts:
            out.setdefault(p.id, p)
        return list(out.values())


def clusters(links: Iterable[tuple[str, str]]) -> dict[str, frozenset[str]]:
    """Post id -> every post joined to it by a chain of ``links`` (union-find), itself included."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in links:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    members: dict[str, set[str]] = {}
    for x in list(parent):
        members.setdefault(find(x), set()).add(x)
    return {x: frozenset(members[find(x)]) for x in parent}


def supervision_from_dump(dump_dir: str | Path) -> Supervision:
    """A Stack Exchange dump folder: duplicate links (type 3) and related links (type 1, hard negatives).

    The dump's own ``splits.tsv`` is ignored (:func:`~semdup.data.learn_folds.fold_supervision` cuts the folds);
    a related link between two posts that are also duplicates counts as a duplicate (both are kept by the
    site: "related" does not say "not a duplicate") and is not a hard negative.
    """
    dump = load_stackexchange_dump(dump_dir)
    dump = StackExchangeDump(dump.posts, dump.duplicate_links, dump.related_links, dump.skipped_links, {},
                             dump.skipped_posts, dump.self_links, dump.other_posts, dump.link_dates, dump.post_fields)
    queries = {a for a, _ in dump.duplicate_links}
    report = SourceReport(str(dump_dir), "stackexchange-dump", len(queries), len(dump.duplicate_links),
                          len(dump.related_links), missing_post_links=dump.skipped_links, self_links=dump.self_links,
                          dated_links=sum(1 for link in dump.duplicate_links if link in dump.link_dates))
    return Supervision("retrieval", dump, report)


def _semeval_report(source: str, fmt: str, sem: SemEvalSet) -> SourceReport:
    related = [r for q in sem.questions for r in q.related]
    return SourceReport(source, fmt, sum(1 for q in sem.questions if any(r.relevant for r in q.related)),
                        sum(1 for r in related if r.relevant), sum(1 for r in related if r.relevant is False),
                        unlabelled=sum(1 for r in related if r.relevant is None))


def supervision_from_semeval(paths: Sequence[str | Path]) -> Supervision:
    """SemEval-2016 Task 3 files (official XML, or the pairs JSONL of part 1), merged: each original question is a
    query, its ``PerfectMatch``/``Relevant`` related questions its duplicates, its ``Irrelevant`` ones hard
    negatives; unlabelled ones are counted and left out of training."""
    from semdup.data.semeval import load_semeval_xml

    sets = [load_semeval_pairs_jsonl(p) if Path(p).suffix == ".jsonl" else load_semeval_xml(p) for p in paths]
    if not sets:
        raise DataError("no SemEval file given; pass the training XML / pairs JSONL files")
    merged = SemEvalSet("+".join(s.name for s in sets), tuple(q for s in sets for q in s.questions))
    seen: set[str] = set()
    for q in merged.questions:
        if q.post.id in seen:
            raise DataError(f"original question {q.post.id} appears in two of {', '.join(map(str, paths))}; "
                            "give each file once")
        seen.add(q.post.id)
    fmt = "semeval-pairs-jsonl" if all(Path(p).suffix == ".jsonl" for p in paths) else "semeval-xml"
    sources = tuple((s.name, frozenset(q.post.id for q in s.questions)) for s in sets) if len(sets) > 1 else ()
    return Supervision("rerank", merged, _semeval_report(", ".join(map(str, paths)), fmt, merged), sources=sources)


def _pairs_without_conflicts(pairs: Sequence[PostPair]) -> tuple[list[PostPair], int, int]:
    """(pairs kept, self pairs left out, conflicting pairs left out); a repeat with the same label is kept once."""
    labels: dict[frozenset[str], set[bool]] = {}
    for p in pairs:
        labels.setdefault(frozenset((p.query.id, p.candidate.id)), set()).add(p.duplicate)
    kept, seen = [], set()
    self_pairs = 0
    conflicting = {k for k, v in labels.items() if len(v) > 1}
    for p in pairs:
        key = frozenset((p.query.id, p.candidate.id))
        if p.query.id == p.candidate.id:
            self_pairs += 1
        elif key not in conflicting and key not in seen:
            kept.append(p)
            seen.add(key)
    return kept, self_pairs, sum(1 for p in pairs if frozenset((p.query.id, p.candidate.id)) in conflicting)


def supervision_from_pairs(path: str | Path) -> Supervision:
    """A JSONL file of labelled pairs (``duplicate`` / ``non-duplicate``, or SemEval's labels)."""
    pairs, self_pairs, conflicting = _pairs_without_conflicts(load_pairs_jsonl(path))
    if conflicting:
        logger.warning("%s: %d pairs are labelled both duplicate and non-duplicate; left out (fix the labels to "
                       "use them)", path, conflicting)
    dups = [p for p in pairs if p.duplicate]
    report = SourceReport(str(path), "pairs-jsonl", len({p.query.id for p in dups}), len(dups),
                          len(pairs) - len(dups), self_links=self_pairs, conflicting=conflicting)
    return Supervision("pairs", tuple(pairs), report)


def _group_posts(obj: dict[str, Any], key: str, path: Path, line_no: int) -> list[Post]:
    items = obj.get(key, [])
    if not isinstance(items, list):
        raise DataError(f"{path}: line {line_no}: {key!r} is not a list; expected {_GROUP_FORMAT}")
    out = []
    for item in items:
        if not isinstance(item, dict) or not str(item.get("id") or ""):
            raise DataError(f"{path}: line {line_no}: an entry of {key!r} is not a post with an id; "
                            f"expected {_GROUP_FORMAT}")
        out.append(Post.from_json(item))
    return out


def supervision_from_groups(path: str | Path) -> Supervision:
    """A JSONL file of groups: a query, its duplicates and its labelled non-duplicates (a post in both lists, or
    the query itself among its candidates, is counted and left out)."""
    p = Path(path)
    questions, self_links, conflicting = [], 0, 0
    seen: set[str] = set()
    for line_no, obj in iter_jsonl(p, _GROUP_FORMAT):
        if not isinstance(obj.get("query"), dict) or not str(obj["query"].get("id") or ""):
            raise DataError(f"{p}: line {line_no}: no query post with an id; expected {_GROUP_FORMAT}")
        query = Post.from_json(obj["query"])
        if query.id in seen:
            raise DataError(f"{p}: line {line_no}: query {query.id} has a second group; give each query one line")
        seen.add(query.id)
        dups, nons = _group_posts(obj, "duplicates", p, line_no), _group_posts(obj, "non_duplicates", p, line_no)
        both = {x.id for x in dups} & {x.id for x in nons}
        conflicting += len(both)
        related, rank = [], 0
        for post, label in [*((x, True) for x in dups), *((x, False) for x in nons)]:
            if post.id == query.id:
                self_links += 1
            elif post.id not in both and all(r.post.id != post.id for r in related):
                rank += 1
                related.append(RelatedQuestion(post, rank, label, "duplicate" if label else "non-duplicate", ()))
        questions.append(OriginalQuestion(query, tuple(related)))
    if not questions:
        raise DataError(f"{p}: holds no group; expected {_GROUP_FORMAT}")
    sem = SemEvalSet(p.stem, tuple(questions))
    report = _semeval_report(str(p), "groups-jsonl", sem)
    report = SourceReport(**{**report.to_json(), "self_links": self_links, "conflicting": conflicting})
    return Supervision("rerank", sem, report)


def load_supervision(paths: str | Path | Sequence[str | Path]) -> Supervision:
    """Read labels from a dump folder, SemEval XML / pairs JSONL files, a pairs JSONL or a groups JSONL.

    The format is told by the path: a folder with ``PostLinks.xml`` is a dump, ``.xml`` files are SemEval, and a
    ``.jsonl`` file is read by its first record (``duplicates`` → groups, ``search_rank`` → SemEval pairs, else
    pairs).

    Raises:
        DataError: an unknown or unreadable source (the message names the accepted ones).
    """
    items = [Path(paths)] if isinstance(paths, str | Path) else [Path(p) for p in paths]
    if not items:
        raise DataError("no supervision given; pass a dump folder, SemEval files or a JSONL of pairs or groups")
    if len(items) == 1 and items[0].is_dir():
        if not (items[0] / "PostLinks.xml").exists():
            raise DataError(f"{items[0]}: a folder without PostLinks.xml; a Stack Exchange dump folder holds "
                            "Posts.xml and PostLinks.xml")
        return supervision_from_dump(items[0])
    if all(p.suffix == ".xml" for p in items):
        return supervision_from_semeval(items)
    if len(items) == 1 and items[0].suffix == ".jsonl":
        first = next((obj for _, obj in iter_jsonl(items[0], "JSONL pairs or groups")), None)
        if first is None:
            raise DataError(f"{items[0]}: empty; expected JSONL pairs or groups")
        if "duplicates" in first:
            return supervision_from_groups(items[0])
        if "search_rank" in first:
            return supervision_from_semeval(items)
        return supervision_from_pairs(items[0])
    if all(p.suffix in (".xml", ".jsonl") for p in items):
        return supervision_from_semeval(items)
    raise DataError(f"cannot tell the format of {', '.join(map(str, items))}; accepted: a Stack Exchange dump "
                    "folder, SemEval .xml / pairs .jsonl files, a .jsonl of labelled pairs or of groups")
