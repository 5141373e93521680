"""SemEval-2016 Task 3 subtask B (question–question similarity, Qatar Living) as Python records.

The official XML repeats ``<OrgQuestion ORGQ_ID=...>`` once per related thread, so elements
are grouped by ``ORGQ_ID`` (file order kept): dev has 500 elements for 50 original questions.
Relevance: ``PerfectMatch`` and ``Relevant`` are relevant, ``Irrelevant`` is not (Nakov et al.,
SemEval 2016, §3). The test input carries ``?`` instead of labels; the gold labels come from the
``.relevancy`` file, which ``load_semeval_xml(xml, relevancy_path=...)`` merges in.

Example::

    >>> d = "/work/shared/data/semeval2016-task3/official/"
    >>> test = load_semeval_xml(d + "SemEval2016-Task3-CQA-QL-test-input.xml",
    ...                         d + "SemEval2016-Task3-CQA-QL-test.xml.subtaskB.relevancy")
    >>> len(test.questions), sum(len(g) for g in test.gold().values())
    (70, 700)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from semdup.core.errors import DataError
from semdup.core.posts import Post
from semdup.data.pairs import PAIR_LABELS, iter_pair_records
from semdup.data.reading import iter_xml_elements, read_utf8_lines, require_attr

__all__ = [
    "Comment",
    "RelatedQuestion",
    "OriginalQuestion",
    "SemEvalSet",
    "load_semeval_xml",
    "load_relevancy",
    "load_semeval_pairs_jsonl",
    "RELQ_LABELS",
    "COMMENT_LABELS",
]

logger = logging.getLogger(__name__)

RELQ_LABELS: dict[str, bool] = {"PerfectMatch": True, "Relevant": True, "Irrelevant": False}
COMMENT_LABELS = ("Good", "PotentiallyUseful", "Bad")
_UNKNOWN = ("?", "")  # what the test input carries where a label would be

_RELEVANCY_FORMAT = "lines 'ORGQ_ID RELQ_ID RANK SCORE true|false' separated by white space"


@dataclass(frozen=True)
class Comment:
    """One answer in a related question's thread; ``label`` is its relevance to that question."""

    id: str
    text: str
    label: str | None


@dataclass(frozen=True)
class RelatedQuestion:
    """A question the search engine returned for an original question, with the human judgement.

    ``rank`` is the search engine's order (RELQ_RANKING_ORDER), ``relevant`` is None when no
    label is known (test input without its ``.relevancy`` file).
    """

    post: Post
    rank: int
    relevant: bool | None
    label: str | None
    comments: tuple[Comment, ...]


@dataclass(frozen=True)
class OriginalQuestion:
    """A new question and its (normally 10) related questions in file order."""

    post: Post
    related: tuple[RelatedQuestion, ...]


@dataclass(frozen=True)
class SemEvalSet:
    """One SemEval split (train part 1 / part 2, dev, test) as original questions with candidates."""

    name: str
    questions: tuple[OriginalQuestion, ...]

    def gold(self) -> dict[str, dict[str, bool]]:
        """Return ``orgq id -> relq id -> relevant`` in file order (the order the scorer breaks ties by).

        Raises:
            DataError: some pair has no label (load the test input with its ``.relevancy`` file).
        """
        out: dict[str, dict[str, bool]] = {}
        unlabelled = 0
        for q in self.questions:
            row = out.setdefault(q.post.id, {})
            for r in q.related:
                if r.relevant is None:
                    unlabelled += 1
                else:
                    row[r.post.id] = r.relevant
        if unlabelled:
            raise DataError(
                f"SemEval set {self.name!r}: {unlabelled} pairs have no relevance label; "
                "load the XML with relevancy_path=<the .subtaskB.relevancy gold file>."
            )
        return out

    def related_posts(self) -> list[Post]:
        """All related questions, first occurrence kept when the same RELQ_ID recurs."""
        seen: dict[str, Post] = {}
        for q in self.questions:
            for r in q.related:
                if r.post.id in seen and seen[r.post.id] != r.post:
                    logger.warning(
                        "SemEval set %r: related question %s appears twice with different text; the first "
                        "is kept. Check the source file.",
                        self.name,
                        r.post.id,
                    )
                seen.setdefault(r.post.id, r.post)
        return list(seen.values())

    def pairs_count(self) -> int:
        """Number of (original, related) pairs."""
        return sum(len(q.related) for q in self.questions)


def load_relevancy(path: str | Path) -> dict[str, dict[str, tuple[float, bool]]]:
    """Read a ``.relevancy`` gold file (or a ``.pred`` file): ``orgq -> relq -> (score, relevant)``.

    File order is kept: the official scorer reads gold and prediction lines side by side, so this
    order is the one ties are broken by.

    Raises:
        DataError: missing/empty file, non-UTF-8 bytes, a line with fewer than 5 fields, a SCORE
            that is not a number, a label other than true/false, or a pair listed twice.
    """
    p = Path(path)
    out: dict[str, dict[str, tuple[float, bool]]] = {}
    for line_no, text in read_utf8_lines(p, _RELEVANCY_FORMAT):
        fields = text.split()
        if not fields:
            continue
        if len(fields) < 5:
            raise DataError(f"{p}: line {line_no}: found {len(fields)} fields; expected {_RELEVANCY_FORMAT}.")
        orgq, relq, _rank, score_text, label = fields[:5]
        try:
            score = float(score_text)
        except ValueError as exc:
            raise DataError(
                f"{p}: line {line_no}: SCORE {score_text!r} is not a number; expected {_RELEVANCY_FORMAT}."
            ) from exc
        if math.isnan(score):
            raise DataError(f"{p}: line {line_no}: SCORE is NaN; a ranking needs comparable scores.")
        if label not in ("true", "false"):
            raise DataError(
                f"{p}: line {line_no}: label {label!r} is not true or false; expected {_RELEVANCY_FORMAT}."
            )
        row = out.setdefault(orgq, {})
        if relq in row:
            raise DataError(f"{p}: line {line_no}: pair ({orgq}, {relq}) is listed twice; each pair must appear once.")
        row[relq] = (score, label == "true")
    if not out:
        raise DataError(f"{p}: holds no pair (only blank lines); expected {_RELEVANCY_FORMAT}.")
    return out


def _text(elem, child: str) -> str:
    node = elem.find(child)
    return (node.text or "") if node is not None else ""


def _relevance(label: str | None, path: Path, relq_id: str) -> tuple[bool | None, str | None]:
    if label is None or label in _UNKNOWN:
        return None, None
    if label not in RELQ_LABELS:
        raise DataError(
            f"{path}: RelQuestion {relq_id} has RELQ_RELEVANCE2ORGQ={label!r}; expected one of "
            f"{', '.join(RELQ_LABELS)} (or '?' in test input)."
        )
    return RELQ_LABELS[label], label


def _comment(elem, path: Path, relq_id: str) -> Comment:
    cid = require_attr(elem, "RELC_ID", path, f"in RelQuestion {relq_id}")
    label = elem.get("RELC_RELEVANCE2RELQ")
    if label in _UNKNOWN:
        label = None
    elif label is not None and label not in COMMENT_LABELS:
        raise DataError(
            f"{path}: RelComment {cid} has RELC_RELEVANCE2RELQ={label!r}; expected one of {', '.join(COMMENT_LABELS)}."
        )
    return Comment(id=cid, text=_text(elem, "RelCText"), label=label)


def _parse_threads(path: Path) -> Iterator[tuple[Post, RelatedQuestion]]:
    """Yield (original post, related question) for every Thread, in file order."""
    for org in iter_xml_elements(path, "OrgQuestion", "SemEval-2016 Task 3 XML (<OrgQuestion> elements)"):
        orgq_id = require_attr(org, "ORGQ_ID", path, "")
        post = Post(id=orgq_id, title=_text(org, "OrgQSubject"), body=_text(org, "OrgQBody"))
        for thread in org.iter("Thread"):
            rel = thread.find("RelQuestion")
            if rel is None:
                raise DataError(
                    f"{path}: a Thread of OrgQuestion {orgq_id} has no <RelQuestion>; expected one per Thread."
                )
            relq_id = require_attr(rel, "RELQ_ID", path, f"in OrgQuestion {orgq_id}")
            rank_text = require_attr(rel, "RELQ_RANKING_ORDER", path, f"{relq_id}")
            try:
                rank = int(rank_text)
            except ValueError as exc:
                raise DataError(
                    f"{path}: RelQuestion {relq_id} has RELQ_RANKING_ORDER={rank_text!r}; expected an integer."
                ) from exc
            relevant, label = _relevance(rel.get("RELQ_RELEVANCE2ORGQ"), path, relq_id)
            comments = tuple(_comment(c, path, relq_id) for c in thread.iter("RelComment"))
            related = RelatedQuestion(
                post=Post(id=relq_id, title=_text(rel, "RelQSubject"), body=_text(rel, "RelQBody")),
                rank=rank,
                relevant=relevant,
                label=label,
                comments=comments,
            )
            yield post, related


def _group(pairs: Iterator[tuple[Post, RelatedQuestion]], path: Path, where: str) -> tuple[OriginalQuestion, ...]:
    """Group (original, related) pairs by original id, keeping first-appearance order."""
    posts: dict[str, Post] = {}
    related: dict[str, list[RelatedQuestion]] = {}
    for post, rel in pairs:
        if post.id in posts and posts[post.id] != post:
            raise DataError(
                f"{path}: original question {post.id} appears with two different subjects/bodies ({where}); "
                "expected every repeat to carry the same text."
            )
        posts.setdefault(post.id, post)
        group = related.setdefault(post.id, [])
        if any(r.post.id == rel.post.id for r in group):
            raise DataError(
                f"{path}: pair ({post.id}, {rel.post.id}) appears twice ({where}); expected each pair once."
            )
        group.append(rel)
    if not posts:
        raise DataError(f"{path}: holds no original question; expected {where}.")
    return tuple(OriginalQuestion(post=posts[q], related=tuple(related[q])) for q in posts)


def _merge_relevancy(
    questions: tuple[OriginalQuestion, ...], gold: dict[str, dict[str, tuple[float, bool]]], xml: Path, rel: Path
) -> tuple[OriginalQuestion, ...]:
    """Fill or override ``relevant`` from the gold file; every gold pair must exist in the XML."""
    known = {(q.post.id, r.post.id) for q in questions for r in q.related}
    absent = [(o, r) for o, row in gold.items() for r in row if (o, r) not in known]
    if absent:
        o, r = absent[0]
        raise DataError(
            f"{rel}: {len(absent)} pair(s) are not in {xml}, e.g. ({o}, {r}); "
            "expected the gold file of this very XML (dev gold with dev XML, test gold with test input)."
        )
    disagree = not_in_gold = 0
    merged = []
    for q in questions:
        row = gold.get(q.post.id, {})
        new_related = []
        for r in q.related:
            if r.post.id not in row:
                not_in_gold += 1
                new_related.append(r)
                continue
            relevant = row[r.post.id][1]
            if r.relevant is not None and r.relevant != relevant:
                disagree += 1
            label = r.label if r.relevant == relevant else ("true" if relevant else "false")
            new_related.append(
                RelatedQuestion(post=r.post, rank=r.rank, relevant=relevant, label=label, comments=r.comments)
            )
        merged.append(OriginalQuestion(post=q.post, related=tuple(new_related)))
    if disagree:
        logger.warning("%d labels in %s differ from %s; the .relevancy gold file wins.", disagree, xml, rel)
    if not_in_gold:
        logger.warning(
            "%d pairs of %s are absent from %s and keep the XML label (None if the XML has none).",
            not_in_gold,
            xml,
            rel,
        )
    return tuple(merged)


def load_semeval_xml(
    xml_path: str | Path, relevancy_path: str | Path | None = None, name: str | None = None
) -> SemEvalSet:
    """Parse an official SemEval-2016 Task 3 XML file (stream-parsed) into a ``SemEvalSet``.

    Args:
        xml_path: e.g. ``SemEval2016-Task3-CQA-QL-dev.xml``.
        relevancy_path: the matching ``.subtaskB.relevancy`` gold file. Its labels fill the test
            input's unknown labels and override the XML's; ``label`` then keeps the XML's raw label
            when the two agree, else holds the gold file's ``true``/``false``.
        name: the set's name; defaults to the XML file's stem.

    Raises:
        DataError: missing/empty/non-UTF-8/malformed XML, a missing required attribute, an unknown
            label, or a gold pair that is not in the XML.
    """
    xml = Path(xml_path)
    questions = _group(_parse_threads(xml), xml, "SemEval-2016 Task 3 XML")
    if relevancy_path is not None:
        rel = Path(relevancy_path)
        questions = _merge_relevancy(questions, load_relevancy(rel), xml, rel)
    out = SemEvalSet(name=name or xml.stem, questions=questions)
    logger.info(
        "Loaded SemEval set %r: %d questions, %d pairs from %s", out.name, len(questions), out.pairs_count(), xml
    )
    return out


def load_semeval_pairs_jsonl(path: str | Path, name: str | None = None) -> SemEvalSet:
    """Load ``train-part1.pairs.jsonl`` into the same structure as the XML sets.

    ``rank`` is the record's ``search_rank``; related questions have no comments (the file has none).

    Raises:
        DataError: see ``pairs.iter_pair_records``; also a missing or non-integer ``search_rank``,
            or a label other than PerfectMatch / Relevant / Irrelevant.
    """
    p = Path(path)

    def records() -> Iterator[tuple[Post, RelatedQuestion]]:
        for line_no, query, candidate, label, obj in iter_pair_records(p):
            if label not in RELQ_LABELS:
                raise DataError(f"{p}: line {line_no}: label {label!r} is not one of {', '.join(RELQ_LABELS)}.")
            rank = obj.get("search_rank")
            if isinstance(rank, bool) or not isinstance(rank, int):
                raise DataError(f"{p}: line {line_no}: search_rank {rank!r} is missing or not an integer.")
            yield (
                query,
                RelatedQuestion(post=candidate, rank=rank, relevant=PAIR_LABELS[label], label=label, comments=()),
            )

    questions = _group(records(), p, "SemEval pairs JSONL")
    out = SemEvalSet(name=name or p.name.split(".")[0], questions=questions)
    logger.info(
        "Loaded SemEval set %r: %d questions, %d pairs from %s", out.name, len(questions), out.pairs_count(), p
    )
    return out
