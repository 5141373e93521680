"""Verdicts as labelled pairs: the JSONL that :func:`semdup.data.pairs.load_pairs_jsonl` reads (and so training).

One line per judged pair of an index, labelled by its reviewers' majority (even splits left out)::

    {"query": {"id": "812", "title": "...", "body": "..."}, "candidate": {"id": "87", ...},
     "label": "duplicate", "index": "travel", "votes": 2, "score": 0.83, "model": "hybrid-minilm-..."}

``query`` is the flagged post, ``candidate`` the earlier post it was flagged against; the text is the posts' as
the index holds them now (a pair whose post was deleted since is left out and counted). The extra keys (index,
votes, score, model) are ignored by the pair reader.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from semdup.alerts.flag import read_posts
from semdup.review.verdicts import VERDICTS_INDEX, iter_verdicts, judged_pairs

__all__ = ["ExportReport", "export_pairs", "LABELS"]

LABELS = {True: "duplicate", False: "non-duplicate"}  # the pair reader's labels (semdup.data.pairs.PAIR_LABELS)
_BATCH = 100


@dataclass
class ExportReport:
    """What an export wrote and left out."""

    written: int = 0
    ties: int = 0
    missing_posts: int = 0


def export_pairs(
    client: Any, index: str, report: ExportReport | None = None, store: str = VERDICTS_INDEX
) -> Iterator[str]:
    """JSONL lines (with their newline) of ``index``'s judged pairs; counts go to ``report`` as they are known."""
    report = report if report is not None else ExportReport()
    pairs, report.ties = judged_pairs(iter_verdicts(client, index, store=store))
    for i in range(0, len(pairs), _BATCH):
        batch = pairs[i : i + _BATCH]
        ids = list(dict.fromkeys(x for p in batch for x in (p.post_id, p.candidate_id)))
        found, _ = read_posts(client, index, ids, to_encode=True)  # pairs to learn from
        posts = {p.id: p for p in found}
        for p in batch:
            query, candidate = posts.get(p.post_id), posts.get(p.candidate_id)
            if query is None or candidate is None:
                report.missing_posts += 1
                continue
            record = {
                "query": query.to_json(),
                "candidate": candidate.to_json(),
                "label": LABELS[p.duplicate],
                "index": index,
                "votes": p.votes,
                "score": p.score,
                "model": p.model,
            }
            report.written += 1
            yield json.dumps(record, ensure_ascii=False) + "\n"
