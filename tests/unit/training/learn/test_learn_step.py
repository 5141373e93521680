"""The learn step: masked and symmetric in-batch softmax (hand-built values), length-sorted encoding = one padded
batch, the batch's exclusion mask."""

from __future__ import annotations

import math

import pytest
import torch

from semdup.core.posts import Post
from semdup.training.learn.step import batch_matrix, encode_sorted
from semdup.training.losses.in_batch import compute_in_batch_softmax_loss
from semdup.training.pairs import TrainingGroup


def _ce(row: list[float], target: int) -> float:
    return -math.log(math.exp(row[target]) / sum(math.exp(x) for x in row))


def test_an_excluded_candidate_leaves_the_softmax_but_the_target_never_does() -> None:
    scores = torch.tensor([[0.9, 0.8, 0.1], [0.2, 0.7, 0.6]])
    exclude = torch.tensor([[True, True, False], [False, True, False]])  # row 1's own target marked too: kept
    got = compute_in_batch_softmax_loss(scores, torch.tensor([0, 1]), 1.0, exclude)
    want = (_ce([0.9, 0.1], 0) + _ce([0.2, 0.7, 0.6], 1)) / 2
    assert float(got) == pytest.approx(want, rel=1e-6)


def test_the_symmetric_loss_adds_each_positive_against_the_queries() -> None:
    scores = torch.tensor([[0.9, 0.1, 0.3, 0.0], [0.2, 0.0, 0.8, 0.4]])  # columns 0 and 2 are the positives
    targets = torch.tensor([0, 2])
    got = compute_in_batch_softmax_loss(scores, targets, 1.0, None, symmetric=True)
    forward = (_ce([0.9, 0.1, 0.3, 0.0], 0) + _ce([0.2, 0.0, 0.8, 0.4], 2)) / 2
    backward = (_ce([0.9, 0.2], 0) + _ce([0.3, 0.8], 1)) / 2
    assert float(got) == pytest.approx((forward + backward) / 2, rel=1e-6)


def test_sorted_chunks_give_the_vectors_of_one_padded_batch() -> None:
    torch.manual_seed(0)

    class Pool(torch.nn.Module):  # masked mean of embeddings: padding must not change a vector
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(50, 4)

        def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            m = mask.unsqueeze(-1).float()
            return (self.emb(ids) * m).sum(1) / m.sum(1)

    enc = Pool()
    ids = [[1, 5, 2], [1, 7, 8, 9, 10, 2], [1, 2], [1, 3, 3, 3, 2]]
    width = max(map(len, ids))
    padded = torch.tensor([s + [0] * (width - len(s)) for s in ids])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in ids])
    want = enc(padded, mask)
    got = encode_sorted(enc, ids, 0, chunk_size=2)
    assert torch.allclose(got, want, atol=1e-6)


def test_the_mask_marks_the_query_itself_and_its_known_duplicates_in_other_groups() -> None:
    p = lambda i: Post(str(i), f"t{i}", "")  # noqa: E731
    groups = [TrainingGroup(p(1), p(2), (p(9),)), TrainingGroup(p(1), p(3), (p(8),)),
              TrainingGroup(p(4), p(1), (p(7),))]
    known = {"1": frozenset({"1", "2", "3"}), "4": frozenset({"4", "1"})}
    queries, cands, targets, exclude = batch_matrix(groups, known, mask_known=True)
    assert [c.id for c in cands] == ["2", "9", "3", "8", "1", "7"] and targets.tolist() == [0, 2, 4]
    assert exclude[0].tolist() == [True, False, True, False, True, False]  # 2 (own target, kept by the loss), 3, 1
    assert exclude[2].tolist() == [False, False, False, False, True, False]
    assert batch_matrix(groups, known, mask_known=False)[3] is None
