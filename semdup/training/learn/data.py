"""The fine-tune's training data: ranking groups plus, per query, the posts known to be its duplicates.

The in-batch softmax treats every candidate of a batch as a negative for every other query. On a site's own
links that is often wrong: a question with four labelled duplicates gives four groups, and when two of them
share a batch each one's positive is the other's "negative". ``known`` lists, per query id, every post the
labels make a duplicate of it (a Stack Exchange duplicate cluster, a SemEval original's relevant related
questions, a pair file's duplicates), so the trainer can leave those out of the query's softmax.

Torch-free; the groups come from the builders of :mod:`semdup.training.pairs` (hard negatives first: related
links, ``Irrelevant`` related questions, labelled non-duplicates; random posts fill the rest).

Example::

    data = learn_data_from_dump(dump, split="train", hard_negatives=1)
    len(data.groups), data.known[some_query_id]   # Travel: 1570 groups; the ids of the query's duplicate cluster
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from semdup.core.errors import DataError
from semdup.data.supervision import clusters
from semdup.training.pairs import TrainingGroup, pair_training_data, semeval_training_data, travel_training_data

__all__ = ["LearnData", "learn_data_from_dump", "learn_data_from_semeval", "learn_data_from_pairs", "learn_data"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LearnData:
    """Ranking groups and the known duplicates of each query (see the module doc).

    Attributes:
        groups: (query, positive, hard negatives) triples.
        known: query id -> ids of posts labelled duplicates of it (its own id included).
        summary: counts, for the log and the checkpoint.
    """

    groups: tuple[TrainingGroup, ...]
    known: Mapping[str, frozenset[str]]
    summary: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.groups:
            raise DataError("no training group: the supervision holds no duplicate pair inside the training split")

    def fingerprint(self) -> str:
        """A hash of the groups' post ids (and texts' lengths): a resumed run must see the same data."""
        h = hashlib.sha256()
        for g in self.groups:
            for p in (g.query, g.positive, *g.negatives):
                h.update(f"{p.id}:{len(p.title)}:{len(p.body)};".encode())
            h.update(b"|")
        return h.hexdigest()[:16]


def _known_from(groups: Sequence[TrainingGroup], extra: Mapping[str, Iterable[str]]) -> dict[str, frozenset[str]]:
    out: dict[str, set[str]] = {}
    for g in groups:
        out.setdefault(g.query.id, {g.query.id}).add(g.positive.id)
    for q, ids in extra.items():
        if q in out:
            out[q].update(ids)
    return {q: frozenset(v) for q, v in out.items()}


def learn_data_from_dump(dump: Any, split: str = "train", hard_negatives: int = 1, seed: int = 0) -> LearnData:
    """Groups from a Stack Exchange dump's duplicate links inside ``split`` (both directions), related links as
    hard negatives; ``known`` = the duplicate cluster of each query (links of every split: a label is a label)."""
    data = travel_training_data(dump, split, negatives=hard_negatives, seed=seed, related_negatives=True)
    cluster = clusters(dump.duplicate_links)
    known = _known_from(data.groups, {q: cluster.get(q, ()) for q in {g.query.id for g in data.groups}})
    summary = {**data.summary, "hard_negatives_per_group": hard_negatives}
    return LearnData(data.groups, known, summary)


def learn_data_from_semeval(sets: Sequence[Any], hard_negatives: int = 1, seed: int = 0) -> LearnData:
    """Groups from SemEval-style sets (original → related with Relevant / Irrelevant labels); an original's
    ``Irrelevant`` related questions are its hard negatives, its relevant ones its ``known`` duplicates."""
    data = semeval_training_data(sets, negatives=hard_negatives, seed=seed)
    relevant = {q.post.id: [r.post.id for r in q.related if r.relevant] for s in sets for q in s.questions}
    known = _known_from(data.groups, relevant)
    return LearnData(data.groups, known, {**data.summary, "hard_negatives_per_group": hard_negatives})


def learn_data_from_pairs(pairs: Sequence[Any], hard_negatives: int = 1, seed: int = 0) -> LearnData:
    """Groups from labelled pairs (``PostPair``): each duplicate pair a group, the query's labelled
    non-duplicates its hard negatives; ``known`` = the cluster its duplicate pairs form."""
    data = pair_training_data(pairs, negatives=hard_negatives, seed=seed)
    cluster = clusters((p.query.id, p.candidate.id) for p in pairs if p.duplicate)
    known = _known_from(data.groups, {q: cluster.get(q, ()) for q in {g.query.id for g in data.groups}})
    return LearnData(data.groups, known, {**data.summary, "hard_negatives_per_group": hard_negatives})


def learn_data(kind: str, train: Any, hard_negatives: int = 1, seed: int = 0) -> LearnData:
    """The groups of a side of :class:`semdup.data.learn_folds.LearnFolds` (a fold's training side, or every
    labelled query for the final model)."""
    if kind == "retrieval":
        dump, split = train
        return learn_data_from_dump(dump, split, hard_negatives, seed)
    if kind == "rerank":
        return learn_data_from_semeval([train], hard_negatives, seed)
    if kind == "pairs":
        return learn_data_from_pairs(list(train), hard_negatives, seed)
    raise ValueError(f"unknown supervision kind {kind!r}; accepted: retrieval, rerank, pairs")
