"""Length batching: sequences of similar length encoded together, each batch padded only to its own longest.

A transformer's cost grows with the padded width of its batch, and the attention mask makes a sequence's vector
independent of what it is batched with, so sorting by length before cutting batches costs nothing in the
vectors (they agree to float rounding) and saves the padding. :func:`length_batches` plans the batches (at most
``max_rows`` sequences and, on a GPU, at most ``max_tokens`` padded tokens each); :func:`pad_rows` builds one
batch's ``input_ids`` / ``attention_mask``.

Example::

    batches = length_batches([5, 12, 3, 12], max_rows=2)    # [array([1, 3]), array([0, 2])]
    ids, mask = pad_rows([[101, 7, 102], ...], batches[0], pad_id=0)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["length_batches", "pad_rows"]


def length_batches(
    lengths: Sequence[int] | np.ndarray, max_rows: int, max_tokens: int | None = None
) -> list[np.ndarray]:
    """Row indices ordered longest first (ties in input order), cut into batches.

    Args:
        lengths: each sequence's length (real tokens).
        max_rows: at most this many sequences per batch (>= 1).
        max_tokens: at most this many padded tokens per batch (rows × the batch's longest); a sequence longer
            than this still gets a batch of its own. None: no token bound.

    Returns:
        The batches, in encoding order; together they hold every index once.
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, got {max_rows}")
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(-lengths, kind="stable")
    if max_tokens is None:
        return [order[i : i + max_rows] for i in range(0, len(order), max_rows)]
    batches: list[np.ndarray] = []
    start = 0
    while start < len(order):
        width = max(1, int(lengths[order[start]]))  # longest first: the batch's first row sets its width
        rows = max(1, min(max_rows, max_tokens // width))
        batches.append(order[start : start + rows])
        start += rows
    return batches


def pad_rows(seqs: Sequence[Sequence[int]], rows: np.ndarray, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """``(input_ids, attention_mask)`` int64 [len(rows), width] of the sequences ``rows``, padded with ``pad_id``
    to the longest of them (at least 1)."""
    picked = [seqs[int(r)] for r in rows]
    width = max(1, max((len(s) for s in picked), default=1))
    ids = np.full((len(picked), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(picked), width), dtype=np.int64)
    for i, s in enumerate(picked):
        ids[i, : len(s)] = s
        mask[i, : len(s)] = 1
    return ids, mask
