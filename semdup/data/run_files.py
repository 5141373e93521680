"""Run files in the official formats, so any figure can be re-scored by the official tools.

* SemEval ``.pred``: ``ORGQ_ID<TAB>RELQ_ID<TAB>0<TAB>SCORE<TAB>true|false``, one line per gold
  candidate, in the gold file's order (the official scorer reads gold and prediction lines side
  by side and stops at the first id mismatch).
* TREC run: ``QID Q0 DOCID RANK SCORE TAG``, best first, ranks from 1, the six columns that
  trec_eval, ir-measures and ranx read. Those tools order a query's documents by SCORE and break
  ties by DOCID, ignoring RANK, so the SCORE column strictly decreases down each list: a score tied
  with the one above it is written one float step (``numpy.nextafter``) below it, and the tools read
  the ranking semdup measured (``tests/unit/data/test_run_files.py`` checks ir-measures' figures).
* TREC qrels: ``QID 0 DOCID 1``, one line per relevant document.
* The official SemEval-2016 results table (``results_subtask_B_2016.tab``).

Files are written to a temporary sibling and renamed into place, so a crash never leaves half a run.

Example::

    >>> path = write_semeval_pred("dev.pred", {"Q1": {"Q1_R1": 0.3}}, {"Q1": ["Q1_R1"]})
    >>> read_semeval_pred("dev.pred")
    {'Q1': {'Q1_R1': 0.3}}
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from semdup.core.errors import DataError
from semdup.data.reading import read_utf8_lines
from semdup.data.semeval import load_relevancy

__all__ = [
    "top_half_scores",
    "write_semeval_pred",
    "read_semeval_pred",
    "read_semeval_pred_labels",
    "write_trec_run",
    "read_trec_run",
    "write_trec_qrels",
    "read_trec_qrels",
    "OfficialRun",
    "load_official_results",
]

logger = logging.getLogger(__name__)


def _write_atomically(path: str | Path, lines: Iterable[str]) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            for line in lines:
                fh.write(line + "\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def _format_score(score: float) -> str:
    return repr(float(score))


def top_half_scores(preds: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Keep the ranking, but map scores so the top half of each question's candidates is >= 0.5: the ``true``
    column of a lexical method's ``.pred`` file, which has no duplicate threshold.

    Monotone per question: ranks, and so MAP/MRR/P@1, are unchanged."""
    out = {}
    for q, row in preds.items():
        order = sorted(row, key=lambda c: -row[c])
        n = len(order)
        ranks = {c: i for i, c in enumerate(order)}
        out[q] = {c: 1.0 - ranks[c] / max(n, 1) for c in row}
    return out


def write_semeval_pred(
    path: str | Path,
    predictions: Mapping[str, Mapping[str, float]],
    gold_order: Mapping[str, Iterable[str]],
    threshold: float = 0.5,
) -> Path:
    """Write an official SemEval prediction file, one line per gold candidate in gold order.

    Args:
        path: the ``.pred`` file to write.
        predictions: orgq id -> relq id -> score.
        gold_order: orgq id -> relq ids in gold-file order; ``SemEvalSet.gold()`` or
            ``load_relevancy(...)`` fit as they are.
        threshold: a candidate is labelled ``true`` when its score is >= this (the label only
            matters for the P/R/F1/Acc columns; choose it on dev).

    Returns:
        The path written. Candidates without a prediction are written with score ``-inf``
        (ranked last, as ``semeval_scores`` does) and counted in a warning.
    """
    missing = 0
    lines: list[str] = []
    for orgq, relqs in gold_order.items():
        row = predictions.get(orgq, {})
        for relq in relqs:
            score = float(row[relq]) if relq in row else -math.inf
            missing += relq not in row
            if math.isnan(score):
                raise ValueError(f"Score of ({orgq}, {relq}) is NaN; every score must be a number.")
            label = "true" if score >= threshold else "false"
            lines.append(f"{orgq}\t{relq}\t0\t{_format_score(score)}\t{label}")
    if missing:
        logger.warning("%d gold candidates had no prediction and were written with score -inf to %s.", missing, path)
    return _write_atomically(path, lines)


def read_semeval_pred(path: str | Path) -> dict[str, dict[str, float]]:
    """Read a SemEval ``.pred`` (or ``.relevancy``) file as ``orgq -> relq -> score`` in file order."""
    return {q: {r: score for r, (score, _) in row.items()} for q, row in load_relevancy(path).items()}


def read_semeval_pred_labels(path: str | Path) -> dict[str, dict[str, bool]]:
    """Read the true/false column of a SemEval ``.pred`` or ``.relevancy`` file."""
    return {q: {r: label for r, (_, label) in row.items()} for q, row in load_relevancy(path).items()}


def _strictly_decreasing(qid: str, hits: Sequence[tuple[str, float]]) -> tuple[list[tuple[str, float]], int]:
    """The hits with each score not below the one written above it moved one float step below that one.

    Returns:
        The hits to write, and how many scores were above the one ranked before them (not mere ties).
    """
    out: list[tuple[str, float]] = []
    previous = written = math.inf
    raised = 0
    for doc, raw in hits:
        score = float(raw)
        if not math.isfinite(score):
            raise ValueError(f"Query {qid}: document {doc} has score {score}; TREC tools need finite scores.")
        raised += score > previous
        previous = score
        written = score if score < written else float(np.nextafter(written, -math.inf))
        out.append((doc, written))
    return out, raised


def write_trec_run(
    path: str | Path,
    ranked_with_scores: Mapping[str, Sequence[tuple[str, float]]],
    top: int = 100,
    tag: str = "semdup",
) -> Path:
    """Write a six-column TREC run, ``QID Q0 DOCID RANK SCORE TAG``, the first ``top`` documents of each query.

    Args:
        ranked_with_scores: query id -> (doc id, score) pairs, best first (written in that order; a
            score not below the one written above it is written one float step below that one, see the
            module docstring, with a warning when it was above it rather than tied).
        top: documents kept per query.
        tag: the run's name in the last column (no white space).

    Raises:
        ValueError: a tag or id with white space, or a non-finite score.
    """
    if not tag or any(c.isspace() for c in tag):
        raise ValueError(f"run tag {tag!r} must be one non-empty word; TREC columns are split on white space.")
    lines: list[str] = []
    raised = 0
    for qid, hits in ranked_with_scores.items():
        written, n_raised = _strictly_decreasing(qid, list(hits)[:top])
        raised += n_raised
        for rank, (doc, score) in enumerate(written, start=1):
            _check_id(qid, doc)
            lines.append(f"{qid} Q0 {doc} {rank} {_format_score(score)} {tag}")
    if raised:
        logger.warning(
            "%d documents in %s score above the one ranked before them (e.g. the reranker puts posts without "
            "semdup fields last); their scores were written just below it so the tools keep semdup's order.",
            raised,
            path,
        )
    return _write_atomically(path, lines)


def read_trec_run(path: str | Path) -> dict[str, list[tuple[str, float]]]:
    """Read a six-column TREC run: query id -> (doc id, score) by RANK.

    Raises:
        DataError: a line without 6 fields, or a RANK / SCORE that is not a number.
    """
    p = Path(path)
    fmt = "lines 'QID Q0 DOCID RANK SCORE TAG' separated by white space"
    rows: dict[str, list[tuple[int, str, float]]] = {}
    for line_no, fields in _fields(p, 6, fmt):
        try:
            rank, score = int(fields[3]), float(fields[4])
        except ValueError as exc:
            raise DataError(f"{p}: line {line_no}: RANK or SCORE is not a number; expected {fmt}.") from exc
        rows.setdefault(fields[0], []).append((rank, fields[2], score))
    return {q: [(d, s) for _, d, s in sorted(hits, key=lambda h: h[0])] for q, hits in rows.items()}


def write_trec_qrels(path: str | Path, relevant: Mapping[str, Iterable[str]]) -> Path:
    """Write TREC qrels, ``QID 0 DOCID 1`` per relevant document (sorted ids, so the file is reproducible).

    A query is never written as relevant to itself: the protocols search a corpus without the query
    (:func:`semdup.measures.ranking.retrieval_scores` drops it the same way). A query with no relevant
    document gets no line; trec_eval then leaves it out of its means, where semdup counts it as 0.
    """
    lines: list[str] = []
    for qid, docs in relevant.items():
        for doc in sorted(set(docs) - {qid}):
            _check_id(qid, doc)
            lines.append(f"{qid} 0 {doc} 1")
    return _write_atomically(path, lines)


def read_trec_qrels(path: str | Path) -> dict[str, set[str]]:
    """Read TREC qrels: query id -> ids with relevance above 0.

    Raises:
        DataError: a line without 4 fields or with a relevance that is not an integer.
    """
    p = Path(path)
    fmt = "lines 'QID ITERATION DOCID RELEVANCE' separated by white space"
    out: dict[str, set[str]] = {}
    for line_no, fields in _fields(p, 4, fmt):
        try:
            grade = int(fields[3])
        except ValueError as exc:
            raise DataError(f"{p}: line {line_no}: RELEVANCE {fields[3]!r} is no integer; expected {fmt}.") from exc
        docs = out.setdefault(fields[0], set())
        if grade > 0:
            docs.add(fields[2])
    return out


def _fields(path: Path, n: int, fmt: str) -> Iterator[tuple[int, list[str]]]:
    for line_no, text in read_utf8_lines(path, fmt):
        fields = text.split()
        if not fields:
            continue
        if len(fields) != n:
            raise DataError(f"{path}: line {line_no}: found {len(fields)} fields; expected {fmt}.")
        yield line_no, fields


def _check_id(qid: str, doc: str) -> None:
    if any(c.isspace() for c in qid + doc) or not qid or not doc:
        raise ValueError(f"ids {qid!r} / {doc!r}: TREC files need non-empty ids without white space.")


@dataclass(frozen=True)
class OfficialRun:
    """One submitted run of SemEval-2016 Task 3 subtask B on the test set, scores in percent.

    The file's columns are name, (empty), MAP, AvgRec, MRR, P, R, F1, Acc: the third column is
    AvgRec and the fourth MRR (already in percent), which the data README lists in another order.
    Checked against the paper's random baseline (MAP 46.98, AvgRec 67.92, MRR 50.96).
    """

    team: str
    run: str
    MAP: float
    AvgRec: float
    MRR: float
    P: float
    R: float
    F1: float
    Acc: float

    @property
    def name(self) -> str:
        return f"{self.team}-{self.run}"


def load_official_results(path: str | Path) -> list[OfficialRun]:
    """Read ``results_subtask_B_2016.tab`` into rows (file order); soft hyphens in names are removed.

    Raises:
        DataError: a line without 9 tab-separated columns or with a non-numeric score.
    """
    p = Path(path)
    fmt = "tab-separated 'team-run, (empty), MAP, AvgRec, MRR, P, R, F1, Acc' lines"
    runs: list[OfficialRun] = []
    for line_no, text in read_utf8_lines(p, fmt):
        if not text.strip():
            continue
        fields = text.split("\t")
        if len(fields) != 9:
            raise DataError(f"{p}: line {line_no}: found {len(fields)} tab-separated columns; expected {fmt}.")
        name = fields[0].replace("\u00ad", "").strip()
        team, _, run = name.rpartition("-")
        try:
            map_, avg_rec, mrr, prec, rec, f1, acc = (float(x) for x in fields[2:])
        except ValueError as exc:
            raise DataError(f"{p}: line {line_no}: a score is not a number; expected {fmt}.") from exc
        pct = [round(100 * x, 4) for x in (map_, avg_rec, prec, rec, f1, acc)]
        runs.append(OfficialRun(team, run, pct[0], pct[1], mrr, pct[2], pct[3], pct[4], pct[5]))
    return runs
