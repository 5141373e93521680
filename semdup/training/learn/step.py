"""One training step of the in-batch fine-tune: encode the step's posts with little padding, score, mask, loss.

The step's posts (B queries, then each group's positive and hard negatives) are encoded once per distinct post
id, sorted by wordpiece length and cut into chunks of ``chunk_size``, each padded only to its own longest post.
A mean-pooled encoder's vector does not depend on the padding (the attention mask hides it), so the vectors,
the loss and the gradients are those of one padded batch, at a fraction of the cost on short forum posts
(SemEval: median 66 wordpieces, a batch of 32 padded to about 120).

Example::

    loss = step_loss(PostVectors(model, prefix), groups, known, loss_fn)
    loss.backward()
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from semdup.core.posts import Post
from semdup.training.pairs import TrainingGroup

__all__ = ["encode_sorted", "batch_matrix", "step_loss"]

logger = logging.getLogger(__name__)


def encode_sorted(
    encoder: torch.nn.Module, ids: Sequence[Sequence[int]], pad_id: int, chunk_size: int
) -> torch.Tensor:
    """Vectors [N, D] of ``N`` wordpiece id lists, computed in length-sorted chunks (rows in input order).

    Args:
        encoder: ``forward(input_ids [b, L], attention_mask [b, L]) -> [b, D]``.
        ids: each post's wordpiece ids, special tokens included.
        pad_id: the tokenizer's padding id.
        chunk_size: posts per forward pass.
    """
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    device = next(encoder.parameters()).device
    parts: list[torch.Tensor] = []
    for start in range(0, len(order), chunk_size):
        rows = order[start : start + chunk_size]
        width = max(len(ids[i]) for i in rows)
        arr = np.full((len(rows), width), pad_id, dtype=np.int64)  # (b, L)
        mask = np.zeros((len(rows), width), dtype=np.int64)  # (b, L)
        for r, i in enumerate(rows):
            arr[r, : len(ids[i])] = ids[i]
            mask[r, : len(ids[i])] = 1
        parts.append(encoder(torch.from_numpy(arr).to(device), torch.from_numpy(mask).to(device)))  # (b, D)
    stacked = torch.cat(parts).float()  # (N, D) in sorted order (float32 also under autocast)
    back = torch.empty(len(order), dtype=torch.long, device=device)
    back[torch.tensor(order, device=device)] = torch.arange(len(order), device=device)
    return stacked[back]  # (N, D) in input order


def batch_matrix(
    groups: Sequence[TrainingGroup], known: Mapping[str, frozenset[str]], mask_known: bool
) -> tuple[list[Post], list[Post], torch.Tensor, torch.Tensor | None]:
    """(queries [B], candidates [B·(1+k)], targets [B], exclude [B, B·(1+k)] or None) of one batch.

    k is the smallest number of hard negatives in the batch (each group keeps its first k). Candidate columns of
    group j are j(1+k) .. j(1+k)+k, its positive first. ``exclude[i, c]`` is True where candidate c is the query
    itself or one of its known duplicates (never its own target column; the loss keeps that).
    """
    k = min(len(g.negatives) for g in groups)
    queries = [g.query for g in groups]
    cands = [p for g in groups for p in (g.positive, *g.negatives[:k])]
    targets = torch.arange(len(groups)) * (1 + k)  # (B,)
    if not mask_known:
        return queries, cands, targets, None
    exclude = torch.zeros(len(queries), len(cands), dtype=torch.bool)  # (B, C)
    for i, q in enumerate(queries):
        dup = known.get(q.id, frozenset()) | {q.id}
        for c, p in enumerate(cands):
            if p.id in dup:
                exclude[i, c] = True
    return queries, cands, targets, exclude


def step_loss(
    vectors: Callable[[Sequence[Post]], torch.Tensor],
    groups: Sequence[TrainingGroup],
    known: Mapping[str, frozenset[str]],
    loss_fn: torch.nn.Module,
    mask_known: bool = True,
) -> torch.Tensor:
    """The in-batch softmax loss of one batch of groups (each distinct post encoded once).

    Args:
        vectors: posts -> their vectors [N, D] through the trainable encoder
            (:class:`~semdup.training.learn.frozen.PostVectors`: length-sorted chunks, the frozen bottom cached).
        groups: the batch.
        known: query id -> known duplicate ids (masked out of its softmax when ``mask_known``).
        loss_fn: :class:`~semdup.training.losses.in_batch.InBatchSoftmaxLoss`.
        mask_known: apply the mask.
    """
    queries, cands, targets, exclude = batch_matrix(groups, known, mask_known)
    distinct: dict[str, int] = {}
    posts: list[Post] = []
    for p in (*queries, *cands):
        if p.id not in distinct:
            distinct[p.id] = len(posts)
            posts.append(p)
    encoded = vectors(posts)  # (U, D)
    dev = encoded.device
    q = encoded[torch.tensor([distinct[p.id] for p in queries], device=dev)]  # (B, D)
    c = encoded[torch.tensor([distinct[p.id] for p in cands], device=dev)]  # (C, D)
    scores = torch.nn.functional.normalize(q, dim=-1) @ torch.nn.functional.normalize(c, dim=-1).T  # (B, C)
    return loss_fn(scores, targets.to(dev), None if exclude is None else exclude.to(dev))
