"""How many passes over the links: a curve of out-of-fold figures after each pass, and the choice it supports.

A fold model reports, after every pass (:func:`~semdup.training.learn.trainer.pass_points`), the figure of the
learned encoder alone on the fold it never saw (:class:`PassPool`). The queries' candidates are fixed beforehand,
from the base encoder's scoring of every labelled query (the BM25 and k-NN candidates the bundle to beat was judged
on, trimmed to the best :data:`POOL` of each): only the queries and those candidates are encoded again, so a point
costs seconds, not a retrieval over the whole corpus. The curve is a proxy for the full out-of-fold figure, good for
comparing passes, not for reporting a model's figure (the candidates and gate use the full scoring).

The choice (:func:`choose_passes`) is cross-fitted as the fusion is: fold f is judged with the model of the passes
that were best on the *other* folds' queries, so the number of passes is never chosen on the queries it is judged
on, and the gate stays as strict as with a fixed recipe. The final model trains the passes best on all the queries.

Example::

    pool = PassPool.from_groups(base_groups_of_the_fold, labelled)
    pool.score(model, prefix)                        # query id -> AP (percent) of the model's cosine
    choice = choose_passes({0: {1.0: f0_p1, 2.0: f0_p2}, 1: {1.0: f1_p1, 2.0: f1_p2}})
    choice.final, choice.per_fold, choice.curve      # 2.0, {0: 2.0, 1: 1.0}, [(1.0, 36.1), (2.0, 36.8)]
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from semdup.core.posts import Post
from semdup.learn.default_bundle import FitData
from semdup.learn.fusion_fit import Group
from semdup.learn.gate import per_query_figures

__all__ = ["PassPool", "PassChoice", "choose_passes", "passes_within", "POOL", "DENSE_ONLY"]

logger = logging.getLogger(__name__)

POOL = 30  # candidates per query kept from each of the lexical and the dense ranking of the base encoder
DENSE_ONLY = {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.0}


def _posts_of(data: FitData) -> tuple[dict[str, Post], Any]:
    """(post id -> post, query key -> the query's post) for the labelled data's kind."""
    if data.kind == "retrieval":
        dump, split = data.dev
        by_id = {p.id: p for p in dump.corpus()}
        queries = {q.post.id: q.post for q in dump.queries(split)}
        return by_id, queries.__getitem__
    if data.kind == "semeval":
        by_id = {r.post.id: r.post for q in data.dev.questions for r in q.related}
        originals = {q.post.id: q.post for q in data.dev.questions}
        return by_id, originals.__getitem__
    pairs = list(data.dev)
    return {p.candidate.id: p.candidate for p in pairs}, lambda key: pairs[int(key)].query


@dataclass(frozen=True)
class PassPool:
    """The queries of one fold and their fixed candidates, to score a model's encoder alone on (module doc)."""

    groups: tuple[Group, ...]
    queries: tuple[Post, ...]
    candidates: Mapping[str, Post]
    data: FitData

    @classmethod
    def from_groups(cls, groups: Sequence[Group], data: FitData, pool: int = POOL) -> PassPool:
        """The pool of ``groups`` (the base encoder's, over ``data``): each query's best ``pool`` candidates by BM25
        and by the base encoder's cosine (all of them where it has fewer, as SemEval's ten)."""
        by_id, query_of = _posts_of(data)
        kept = []
        for g in groups:
            n = len(g.candidate_ids)
            if n > 2 * pool:
                lex = np.argsort(-g.lexical, kind="stable")[:pool]
                dense = np.argsort(-g.cos_dense, kind="stable")[:pool]
                rows = np.asarray(sorted(set(lex.tolist()) | set(dense.tolist())), dtype=np.int64)
                g = Group(g.query_id, tuple(g.candidate_ids[i] for i in rows), g.cos_bow[rows], g.cos_dense[rows],
                          g.lexical[rows], None if g.cos_title is None else g.cos_title[rows])
            kept.append(g)
        needed = {c for g in kept for c in g.candidate_ids}
        return cls(tuple(kept), tuple(query_of(g.query_id) for g in kept), {c: by_id[c] for c in needed}, data)

    def posts(self) -> int:
        """How many posts a point encodes."""
        return len(self.queries) + len(self.candidates)

    def scored_posts(self) -> int:
        """How many posts the fold's full scoring encodes: a dump's whole corpus (its k-NN searches all of it),
        else the fold's own posts, the pool's."""
        if self.data.kind == "retrieval":
            return len(self.data.dev[0].corpus())
        return self.posts()

    def all_posts(self) -> list[Post]:
        """The posts a point encodes: the queries, then the candidates."""
        return [*self.queries, *self.candidates.values()]

    def base_figures(self) -> dict[str, float]:
        """The point of the encoder the pool's candidates were ranked by (the base, untrained: the curve's 0)."""
        return per_query_figures(list(self.groups), DENSE_ONLY, self.data) if self.groups else {}

    def score(self, encode: Any) -> dict[str, float]:
        """query key -> figure (percent) of the encoder alone, ``encode(posts) -> [N, D]`` giving the vectors."""
        if not self.groups:
            return {}
        cand_ids = list(self.candidates)
        vectors = np.asarray(encode(self.all_posts()), dtype=np.float64)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        q, c = vectors[: len(self.queries)], vectors[len(self.queries) :]
        col = {cid: j for j, cid in enumerate(cand_ids)}
        rescored = [replace(g, cos_dense=c[[col[x] for x in g.candidate_ids]] @ q[i])
                    for i, g in enumerate(self.groups)]  # fmt: skip
        return per_query_figures(rescored, DENSE_ONLY, self.data)


@dataclass(frozen=True)
class PassChoice:
    """The passes each fold is judged at (chosen on the other folds), the final model's, and the pooled curve."""

    per_fold: dict[int, float]
    final: float
    curve: list[tuple[float, float]]  # (passes, the mean figure over every query at that many passes)

    def line(self) -> str:
        points = ", ".join(f"{p:g}: {v:.2f}" for p, v in self.curve)
        folds = ", ".join(f"fold {f + 1} at {p:g}" for f, p in sorted(self.per_fold.items()))
        return (f"passes -> out-of-fold figure of the encoder alone (pool of each query's candidates): {points}; "
                f"the final model trains {self.final:g} (judged: {folds}, each chosen on the other folds)")

    def to_json(self) -> dict[str, Any]:
        return {"curve": [{"passes": p, "figure": round(v, 4)} for p, v in self.curve],
                "per_fold": {str(f): p for f, p in self.per_fold.items()}, "final": self.final}


def _best(curves: Sequence[Mapping[float, Mapping[str, float]]], points: Sequence[float]) -> tuple[float, list]:
    """The passes whose mean figure over the queries of ``curves`` is highest (the fewer passes on a tie)."""
    means = []
    for p in points:
        values = [v for c in curves for v in c[p].values()]
        means.append((p, float(np.mean(values)) if values else math.nan))
    best = max(means, key=lambda pv: (pv[1], -pv[0]))[0] if means else points[-1]
    return best, means


def choose_passes(curves: Mapping[int, Mapping[float, Mapping[str, float]]]) -> PassChoice:
    """fold -> passes -> query key -> figure, to the choice of the module doc (every fold scored at the same
    points: the fold models run the same recipe)."""
    points = sorted(set.intersection(*(set(c) for c in curves.values()))) if curves else []
    if not points:
        raise ValueError("no pass was scored on every fold")
    final, pooled = _best(list(curves.values()), points)
    per_fold = {f: _best([c for g, c in curves.items() if g != f] or [curves[f]], points)[0] for f in curves}
    return PassChoice(per_fold, final, pooled)


def passes_within(seconds: float, step_seconds: float, steps_per_pass: int, point_seconds: float,
                  most: float, least: float = 0.25) -> float:
    """The most passes (in quarters, at most ``most``) whose training and per-pass points fit in ``seconds``.

    ``steps_per_pass``: the steps one pass takes summed over every model still to train (the fold models and the
    final one); ``point_seconds``: what one point of the curve costs summed over the fold models. Below ``least``
    the budget is too short to plan by: ``least`` (the run then stops at the budget, saved, as before)."""
    per_pass = step_seconds * steps_per_pass + point_seconds
    fit = seconds / per_pass if per_pass > 0 else most
    return max(least, min(most, math.floor(fit * 4) / 4))
