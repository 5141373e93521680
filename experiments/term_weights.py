"""Issue #18 research: the bag-of-words term weights t of the fused score learned from labels (BOW-CNN's t, IDF at
the start); ``python -m experiments.learn_terms`` measures them (they did not beat IDF, so no bundle ships them).

dos Santos et al. (2015, §3.2 and Table 5) learn t ∈ R^|V|, initialised to IDF, and find learned weights better
than IDF. Here the rest of the score is fixed (the encoder, the BM25 and title terms and the fusion weights are
what they are), and only t moves:

    s(q, c) = β_bow · cos(tf(q)∘t, tf(c)∘t) + o(q, c)          o = β_dense·cos_dense + α·lexnorm + β_title·cos_title

trained with BOW-CNN's loss (log(1 + exp(−γ (s⁺ − max s⁻))), γ = 10, the hardest labelled negative of each
query against each of its duplicates; :mod:`semdup.training.losses.bow_cnn_logistic`) plus λ·‖t − idf‖², which
keeps the terms the labels say nothing about at their IDF. Full-batch Adam; a few thousand queries take seconds.

Example::

    t = learn_term_weights(groups, idf, beta_bow=0.75, epochs=100)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from semdup.training.losses.bow_cnn_logistic import compute_logistic_loss_from_scores

__all__ = ["TermGroup", "learn_term_weights", "compute_bow_cosines"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TermGroup:
    """One query and its labelled candidates, as term counts.

    Attributes:
        query: (term ids [n], counts [n]) of the query.
        candidates: the same per candidate.
        labels: duplicate or not, per candidate.
        offset: the fixed part o of each candidate's score (see the module doc), [len(candidates)].
    """

    query: tuple[np.ndarray, np.ndarray]
    candidates: tuple[tuple[np.ndarray, np.ndarray], ...]
    labels: np.ndarray
    offset: np.ndarray


def compute_bow_cosines(t: torch.Tensor, query: tuple[torch.Tensor, torch.Tensor],
                        cands: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """cos(tf(q)∘t, tf(c)∘t) per candidate [C]; 0 where either side has no weighted term.

    Args:
        t: term weights [|V|].
        query: (ids [n], counts [n]) with distinct ids.
        cands: the same per candidate.
    """
    q_ids, q_tf = query
    q_w = q_tf * t[q_ids]  # (n,)
    q_norm = torch.linalg.vector_norm(q_w)
    out = []
    for ids, tf in cands:
        w = tf * t[ids]  # (m,)
        common_q = torch.isin(q_ids, ids)
        common_c = torch.isin(ids, q_ids)
        # both id lists are sorted and distinct, so the common ids line up in order
        dot = torch.sum(q_w[common_q] * w[common_c])
        out.append(dot / (q_norm * torch.linalg.vector_norm(w)).clamp_min(1e-12))
    return torch.stack(out)  # (C,)


def _tensors(groups: Sequence[TermGroup]) -> list[tuple]:
    prepared = []
    for g in groups:
        pos = np.flatnonzero(g.labels)
        neg = np.flatnonzero(~np.asarray(g.labels, dtype=bool))
        if len(pos) == 0 or len(neg) == 0:
            continue  # no margin to learn from

        def sort(ids: np.ndarray, tf: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
            order = np.argsort(ids)
            return torch.from_numpy(ids[order].astype(np.int64)), torch.from_numpy(tf[order].astype(np.float64))

        prepared.append((sort(*g.query), [sort(*c) for c in g.candidates], torch.from_numpy(pos),
                         torch.from_numpy(neg), torch.from_numpy(np.asarray(g.offset, dtype=np.float64))))
    return prepared


def learn_term_weights(groups: Sequence[TermGroup], idf: np.ndarray, beta_bow: float, epochs: int = 100,
                       lr: float = 0.05, l2: float = 1e-3, gamma: float = 10.0) -> np.ndarray:
    """t [|V|] float32 learned from ``groups`` (see the module doc); ``idf`` is where it starts and is pulled to.

    Args:
        groups: training queries with labelled candidates (queries without a duplicate or without a labelled
            non-duplicate are skipped: they carry no margin).
        idf: the starting weights [|V|].
        beta_bow: the fusion's weight of the bag-of-words cosine (0: t cannot change a score; returns idf).
        epochs: full-batch Adam steps.
        lr: Adam's learning rate (in IDF units: IDF values lie around 1 to 9).
        l2: λ of λ·‖t − idf‖² / |V| (mean over terms).
        gamma: γ of the logistic loss.
    """
    start = np.asarray(idf, dtype=np.float64)
    prepared = _tensors(groups)
    if beta_bow == 0 or not prepared:
        logger.info("term weights stay IDF (beta_bow %g, %d queries with a margin)", beta_bow, len(prepared))
        return start.astype(np.float32)
    anchor = torch.from_numpy(start)
    t = torch.nn.Parameter(anchor.clone())
    opt = torch.optim.Adam([t], lr=lr)
    for epoch in range(epochs):
        opt.zero_grad()
        rows = []
        for query, cands, pos, neg, offset in prepared:
            s = beta_bow * compute_bow_cosines(t, query, cands) + offset  # (C,)
            hardest = s[neg].max()
            rows.append(torch.stack([s[pos], hardest.expand(len(pos))], dim=1))  # (P, 2)
        scores = torch.cat(rows)  # (ΣP, 2): positive, hardest negative
        loss = compute_logistic_loss_from_scores(scores, gamma) + l2 * torch.mean((t - anchor) ** 2)
        loss.backward()
        opt.step()
        with torch.no_grad():
            t.clamp_(min=0.0)  # a negative weight would flip a shared term into evidence against
        if epoch in (0, epochs - 1):
            logger.info("term weights epoch %d: loss %.4f", epoch, float(loss.detach()))
    return t.detach().numpy().astype(np.float32)
