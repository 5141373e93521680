"""Training-data builders: the three real data sets → ranking groups and labelled pairs.

Two shapes, matching the two loss batch formats (``registry.BATCH_FORMATS``):

* ``groups``: (query, positive, K negatives) for ranking losses (BOW-CNN's logistic loss, RCNN's
  max-margin). K = 20 negatives are sampled up front per positive, as dos Santos et al. 2015 §4.
* ``pairs``: (query, candidate, 1/0) for pair losses (Bogdanova's MSE, SCQA's contrastive loss).

Sources:

* SemEval (part 1 + part 2): relevant related questions are positives, the original's irrelevant
  related questions are hard negatives, related questions of other originals fill up the rest.
* Travel train split: duplicate links (both directions) are positives; negatives are the query's
  related links (not duplicates), the non-duplicates a BM25 ranking puts highest (optional), and
  random corpus posts. Pair losses can get extra random (easy) 0-pairs beside the hard ones
  (``random_pair_negatives``): a contrastive loss that only ever sees hard negatives never learns
  to push unrelated posts apart (SCQA on Travel: dev MAP 0.96 without them).
* AskUbuntu pairs: the labelled pairs as they are; groups use the duplicates as positives and
  random candidates of other pairs as negatives.

Torch-free; every builder is deterministic for a given seed.
"""

from __future__ import annotations

import logging
import random
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from semdup.core.posts import Post

__all__ = [
    "TrainingGroup",
    "LabelledPair",
    "TrainingData",
    "semeval_training_data",
    "travel_training_data",
    "pair_training_data",
    "split_held_out",
    "semeval_qa_pairs",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainingGroup:
    """A query, one duplicate of it, and K non-duplicates (hard ones first)."""

    query: Post
    positive: Post
    negatives: tuple[Post, ...]


@dataclass(frozen=True)
class LabelledPair:
    """A (query, candidate) pair with label 1.0 (duplicate) or 0.0."""

    query: Post
    candidate: Post
    label: float


@dataclass(frozen=True)
class TrainingData:
    """Everything the trainer needs from one data set.

    Attributes:
        groups: ranking groups (for ``"groups"`` losses).
        pairs: labelled pairs (for ``"pairs"`` losses).
        vocab_posts: the posts whose text builds the vocabulary and IDF.
        summary: counts and choices, saved in the checkpoint's config.
        resample_groups: ``epoch -> groups`` with the same queries, positives and hard negatives and
            freshly drawn random ones (``TrainSettings.fresh_negatives``); None where a builder has none.
    """

    groups: tuple[TrainingGroup, ...]
    pairs: tuple[LabelledPair, ...]
    vocab_posts: tuple[Post, ...]
    summary: dict[str, Any] = field(default_factory=dict)
    resample_groups: Callable[[int], tuple[TrainingGroup, ...]] | None = field(default=None, compare=False)


def _fill(
    rng: random.Random, hard: Sequence[Post], pool: Sequence[Post], k: int, exclude: set[str]
) -> tuple[Post, ...]:
    """k negatives: up to k hard ones (shuffled), then random pool posts not in ``exclude``."""
    hard = [p for p in hard if p.id not in exclude]
    rng.shuffle(hard)
    chosen = hard[:k]
    seen = exclude | {p.id for p in chosen}
    tries = 0
    while len(chosen) < k and tries < 50 * k and pool:
        p = pool[rng.randrange(len(pool))]
        tries += 1
        if p.id not in seen:
            chosen.append(p)
            seen.add(p.id)
    return tuple(chosen)


def semeval_training_data(
    sets: Sequence[Any], negatives: int = 20, pair_negatives: int = 2, seed: int = 0
) -> TrainingData:
    """Groups and pairs from SemEval sets (``SemEvalSet`` of part 1 and part 2).

    Args:
        sets: the training ``SemEvalSet`` objects (never dev or test).
        negatives: K negatives per group.
        pair_negatives: random related questions of other originals added per original as 0-pairs.
        seed: sampling seed.
    """
    rng = random.Random(seed)
    questions = [q for s in sets for q in s.questions]
    pool = [r.post for q in questions for r in q.related]
    groups: list[TrainingGroup] = []
    pairs: list[LabelledPair] = []
    n_pos = n_hard = 0
    for q in questions:
        pos = [r.post for r in q.related if r.relevant]
        irr = [r.post for r in q.related if r.relevant is False]
        own = {q.post.id} | {r.post.id for r in q.related}
        for p in pos:
            groups.append(TrainingGroup(q.post, p, _fill(rng, irr, pool, negatives, own - {x.id for x in irr})))
        for r in q.related:
            if r.relevant is not None:
                pairs.append(LabelledPair(q.post, r.post, 1.0 if r.relevant else 0.0))
        for p in _fill(rng, [], pool, pair_negatives, own):
            pairs.append(LabelledPair(q.post, p, 0.0))
        n_pos += len(pos)
        n_hard += len(irr)
    vocab_posts = tuple({p.id: p for p in [q.post for q in questions] + pool}.values())
    summary = {
        "source": "semeval",
        "sets": [s.name for s in sets],
        "originals": len(questions),
        "positives": n_pos,
        "hard_negatives": n_hard,
        "groups": len(groups),
        "pairs": len(pairs),
    }
    logger.info("SemEval training data: %s", summary)
    return TrainingData(tuple(groups), tuple(pairs), vocab_posts, summary)


def travel_training_data(
    dump: Any,
    split: str = "train",
    negatives: int = 20,
    pair_negatives: int = 3,
    lexical_negatives: Mapping[str, Sequence[str]] | None = None,
    lexical_share: float = 0.5,
    seed: int = 0,
    related_negatives: bool = True,
    random_pair_negatives: int = 0,
) -> TrainingData:
    """Groups and pairs from a Stack Exchange dump's duplicate links inside one split.

    Args:
        dump: a ``StackExchangeDump`` loaded with its splits.
        split: the split whose duplicate links are used (``train``).
        negatives: K negatives per group.
        pair_negatives: 0-pairs per positive pair (hard first).
        lexical_negatives: post id → ids a lexical ranking puts highest (non-duplicates are kept).
        lexical_share: at most this share of the K negatives comes from ``lexical_negatives``.
        seed: sampling seed.
        related_negatives: use the query's related links (LinkTypeId=1) as negatives; False
            leaves the rest to random posts (dos Santos et al. 2015 sample negatives at random).
        random_pair_negatives: random corpus posts (not duplicates of the query) added as 0-pairs
            per positive pair, beside the ``pair_negatives`` hard ones (Das et al. 2016 sample
            random non-duplicate questions). Drawn from their own seeded stream, so the groups
            and the hard pairs are the same whatever this is.
    """
    rng = random.Random(seed)
    easy_rng = random.Random(f"random-pair-negatives:{seed}")
    posts = dump.posts
    corpus = list(posts.values())
    related: dict[str, set[str]] = {}
    for a, b in dump.related_links:
        related.setdefault(a, set()).add(b)
        related.setdefault(b, set()).add(a)
    positives: list[tuple[str, str]] = []
    for a, b in dump.duplicate_links:
        if dump.splits.get(a) == split and dump.splits.get(b) == split:
            positives.extend([(a, b), (b, a)])
    positives = list(dict.fromkeys(positives))
    groups: list[TrainingGroup] = []
    pairs: list[LabelledPair] = []
    fixed: list[tuple[Post, Post, list[Post], set[str]]] = []  # what stays when random negatives are redrawn
    n_rel = n_lex = 0
    for qid, pid in positives:
        dups = dump.duplicates_of(qid) | {qid}
        hard = [posts[r] for r in sorted(related.get(qid, ())) if r in posts and r not in dups and related_negatives]
        lex = [posts[r] for r in (lexical_negatives or {}).get(qid, ()) if r in posts and r not in dups]
        n_lex_k = min(len(lex), int(negatives * lexical_share))
        rng.shuffle(lex)
        hard_all = hard[:negatives] + [p for p in lex if p.id not in {h.id for h in hard}][:n_lex_k]
        negs = _fill(rng, hard_all, corpus, negatives, set(dups))
        groups.append(TrainingGroup(posts[qid], posts[pid], negs))
        fixed.append((posts[qid], posts[pid], hard_all, set(dups)))
        pairs.append(LabelledPair(posts[qid], posts[pid], 1.0))
        for p in negs[:pair_negatives]:
            pairs.append(LabelledPair(posts[qid], p, 0.0))
        if random_pair_negatives > 0:
            taken = set(dups) | {p.id for p in negs[:pair_negatives]}
            for p in _fill(easy_rng, [], corpus, random_pair_negatives, taken):
                pairs.append(LabelledPair(posts[qid], p, 0.0))
        n_rel += len(hard)
        n_lex += n_lex_k
    summary = {
        "source": "travel",
        "split": split,
        "positive_pairs": len(positives),
        "related_negatives": n_rel,
        "lexical_negatives": n_lex,
        "groups": len(groups),
        "pairs": len(pairs),
    }
    if random_pair_negatives > 0:
        summary["random_pair_negatives"] = random_pair_negatives
    logger.info("Travel training data: %s", summary)

    def resample(epoch: int) -> tuple[TrainingGroup, ...]:
        """The same groups with random negatives drawn again from a stream of (seed, epoch)."""
        r = random.Random(f"fresh-negatives:{seed}:{epoch}")
        return tuple(TrainingGroup(q, p, _fill(r, hard, corpus, negatives, set(dups))) for q, p, hard, dups in fixed)

    return TrainingData(tuple(groups), tuple(pairs), tuple(corpus), summary, resample_groups=resample)


def split_held_out(items: Sequence[Any], key: Any, share: float = 0.2, salt: str = "dev") -> tuple[list, list]:
    """Deterministic (train, held-out) split by a crc32 hash of ``key(item)``, about ``share`` held out."""
    train, held = [], []
    for it in items:
        h = zlib.crc32(f"{salt}:{key(it)}".encode()) % 1000
        (held if h < share * 1000 else train).append(it)
    return train, held


def pair_training_data(pairs_in: Sequence[Any], negatives: int = 20, seed: int = 0) -> TrainingData:
    """Groups and pairs from labelled ``PostPair`` records (AskUbuntu).

    Args:
        pairs_in: ``PostPair(query, candidate, duplicate, label)`` records of the training side only.
        negatives: K negatives per group: the query's own non-duplicate candidates, then random
            candidates of other pairs.
        seed: sampling seed.
    """
    rng = random.Random(seed)
    pool = [p.candidate for p in pairs_in] + [p.query for p in pairs_in]
    non_dup: dict[str, list[Post]] = {}
    for p in pairs_in:
        if not p.duplicate:
            non_dup.setdefault(p.query.id, []).append(p.candidate)
    groups = []
    for p in pairs_in:
        if p.duplicate:
            exclude = {p.query.id, p.candidate.id}
            groups.append(
                TrainingGroup(p.query, p.candidate, _fill(rng, non_dup.get(p.query.id, []), pool, negatives, exclude))
            )
    pairs = tuple(LabelledPair(p.query, p.candidate, 1.0 if p.duplicate else 0.0) for p in pairs_in)
    vocab_posts = tuple({x.id: x for x in pool}.values())
    summary = {
        "source": "pairs",
        "pairs": len(pairs),
        "duplicates": sum(1 for p in pairs_in if p.duplicate),
        "groups": len(groups),
    }
    logger.info("pair training data: %s", summary)
    return TrainingData(tuple(groups), pairs, vocab_posts, summary)


def semeval_qa_pairs(sets: Sequence[Any], random_negatives: int = 1, seed: int = 0) -> tuple[LabelledPair, ...]:
    """Question–answer pairs from SemEval comments, SCQA's training signal (Das et al. 2016, §3.1).

    (related question, Good comment) → 1.0; (related question, Bad comment) → 0.0; plus
    ``random_negatives`` comments of other threads per Good comment → 0.0. PotentiallyUseful
    comments are left out. A comment becomes ``Post(id, title="", body=text)``. Only sets with
    comments (the official XML) give pairs; training sets only, never dev or test.
    """
    rng = random.Random(seed)
    threads = [(r.post, r.comments) for s in sets for q in s.questions for r in q.related if r.comments]
    pool = [Post(c.id, "", c.text) for _, cs in threads for c in cs if c.text.strip()]
    out: list[LabelledPair] = []
    for question, comments in threads:
        own = {c.id for c in comments}
        for c in comments:
            if not c.text.strip() or c.label not in ("Good", "Bad"):
                continue
            out.append(LabelledPair(question, Post(c.id, "", c.text), 1.0 if c.label == "Good" else 0.0))
            if c.label == "Good":
                out.extend(LabelledPair(question, p, 0.0) for p in _fill(rng, [], pool, random_negatives, own))
    logger.info("SemEval question-answer pairs: %d (%d positive)", len(out), sum(p.label > 0 for p in out))
    return tuple(out)
