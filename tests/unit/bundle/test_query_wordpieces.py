"""A query cut at N wordpieces reads as the tokenizer's own cut: the first N - 1 pieces, then [SEP]."""

from __future__ import annotations

import numpy as np
import pytest

from semdup.bundle.bundle import _cut_wordpieces

CLS, SEP, PAD = 101, 102, 0


def _inputs(rows: list[list[int]]) -> dict[str, np.ndarray]:
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), PAD, dtype=np.int64)
    mask = np.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = r, 1
    return {"input_ids": ids, "attention_mask": mask}


def test_a_long_query_keeps_its_first_pieces_and_ends_with_sep() -> None:
    arrays = _inputs([[CLS, 7, 8, 9, 10, 11, SEP], [CLS, 7, SEP]])
    cut = _cut_wordpieces(arrays, 4)
    assert cut["input_ids"].tolist() == [[CLS, 7, 8, SEP], [CLS, 7, SEP, PAD]]
    assert cut["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert arrays["input_ids"][0, 3] == 9  # the caller's arrays are left as they were


def test_a_limit_above_every_length_changes_nothing() -> None:
    arrays = _inputs([[CLS, 7, 8, SEP]])
    cut = _cut_wordpieces(arrays, 256)
    assert all(np.array_equal(cut[k], arrays[k]) for k in arrays)


def test_a_limit_below_three_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        _cut_wordpieces(_inputs([[CLS, 7, SEP]]), 2)
