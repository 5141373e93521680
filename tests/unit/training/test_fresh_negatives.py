"""Fresh negatives: each epoch redraws the random negatives of the same groups; hard ones and positives stay."""

from __future__ import annotations

from pathlib import Path

import pytest

from semdup.core.errors import ConfigError
from semdup.core.posts import Post
from semdup.data.stackexchange import StackExchangeDump
from semdup.training.pairs import TrainingData, travel_training_data
from semdup.training.trainer import TrainSettings, train


def _dump() -> StackExchangeDump:
    """40 train posts: 0↔1, 2↔3, 4↔5 duplicates; 0 is related to 6 (a hard negative)."""
    posts = {str(i): Post(str(i), f"title {i}", f"body of post {i} about place {i % 7}") for i in range(40)}
    return StackExchangeDump(
        posts=posts,
        duplicate_links=(("0", "1"), ("2", "3"), ("4", "5")),
        related_links=(("0", "6"),),
        skipped_links=0,
        splits={pid: "train" for pid in posts},
    )


def test_a_redraw_keeps_queries_positives_and_hard_negatives_and_changes_the_random_ones() -> None:
    dump = _dump()
    data = travel_training_data(dump, negatives=5, seed=0)
    assert data.resample_groups is not None
    again, later = data.resample_groups(2), data.resample_groups(3)
    assert again == data.resample_groups(2)  # one seeded stream per epoch: a run repeats
    assert [(g.query, g.positive) for g in again] == [(g.query, g.positive) for g in data.groups]
    assert {g.negatives for g in again} != {g.negatives for g in later}
    for g in again:
        assert len(g.negatives) == 5
        assert not {p.id for p in g.negatives} & (dump.duplicates_of(g.query.id) | {g.query.id})
        if g.query.id == "0":
            assert "6" in {p.id for p in g.negatives}  # the related post stays a negative


def test_fresh_negatives_are_refused_where_the_data_cannot_redraw(tmp_path: Path) -> None:
    data = travel_training_data(_dump(), negatives=3, seed=0)
    fixed = TrainingData(data.groups, data.pairs, data.vocab_posts, data.summary)  # no resample_groups
    settings = TrainSettings(arch="bow-cnn", epochs=1, fresh_negatives=True, threads=1,
                             hparams={"word_vectors": "none", "emb_dim": 8, "conv_units": 16})
    with pytest.raises(ConfigError, match="redraw"):
        train(settings, fixed, lambda s: {"MAP": 0.0}, "MAP", tmp_path / "ckpt")


def test_a_fresh_negatives_run_trains_on_redrawn_groups(tmp_path: Path) -> None:
    data = travel_training_data(_dump(), negatives=3, seed=0)
    calls: list[int] = []

    def redraw(epoch: int):
        calls.append(epoch)
        return data.resample_groups(epoch)

    wrapped = TrainingData(data.groups, data.pairs, data.vocab_posts, data.summary, resample_groups=redraw)
    settings = TrainSettings(arch="bow-cnn", epochs=3, batch_size=2, negatives=3, patience=5, fresh_negatives=True,
                             threads=1, hparams={"word_vectors": "none", "emb_dim": 8, "conv_units": 16})
    result = train(settings, wrapped, lambda s: {"MAP": 1.0}, "MAP", tmp_path / "ckpt")
    assert calls == [2, 3]  # epoch 1 uses the up-front draw
    assert len(result.curve) == 3
