"""The frozen bottom computed once: the vectors of the cached bottom + the top layers are the full forward pass's
(within the cache's float16 rounding), gradients reach the trainable layers only, each post is computed once, and a
model with other frozen weights is refused."""

from __future__ import annotations

import pytest
import torch

from semdup.core.posts import Post
from semdup.training.learn.frozen import FrozenPrefix, PostVectors, build_model
from semdup.training.learn.settings import LearnSettings
from semdup.training.learn.step import encode_sorted

POSTS = [Post("1", "Visa for Qatar?", "How long does a tourist visa take at Doha airport?"),
         Post("2", "Taxi", ""),
         Post("3", "", "Where can I rent a flat in Al Sadd with a sea view and a pool, not too far from work?"),
         Post("4", "Driving licence", "Can I convert my Indian licence?")]


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(LearnSettings(max_len=32, freeze_layers=4)).eval()


def test_the_cached_bottom_gives_the_full_forward_pass(model: torch.nn.Module) -> None:
    prefix = FrozenPrefix(model)
    full = PostVectors(model, None, chunk_size=3)
    with torch.no_grad():
        want = full(POSTS)
        got = PostVectors(model, prefix, chunk_size=3)(POSTS)
        again = encode_sorted(model.encoder, [full.tokens(p) for p in POSTS], full.tokens.pad, 4)
    assert torch.allclose(want, again, atol=1e-5)
    assert torch.allclose(got, want, atol=2e-3) and float((got * want).sum(1).min()) > 0.9999
    assert len(prefix) == len(POSTS)
    prefix.states(POSTS[:2])  # already there: nothing recomputed
    assert len(prefix) == len(POSTS)


def test_gradients_reach_the_top_layers_only(model: torch.nn.Module) -> None:
    prefix = FrozenPrefix(model)
    model.train()
    try:
        PostVectors(model, prefix, chunk_size=2)(POSTS).sum().backward()
        top = model.encoder.bert.encoder.layer[4].output.dense.weight.grad
        assert top is not None and float(top.abs().sum()) > 0
        assert all(p.grad is None for p in model.encoder.bert.encoder.layer[3].parameters())
    finally:
        model.zero_grad(set_to_none=True)
        model.eval()


def test_a_model_with_other_frozen_weights_is_refused(model: torch.nn.Module) -> None:
    prefix = FrozenPrefix(model)
    other = build_model(LearnSettings(max_len=32, freeze_layers=4))
    with torch.no_grad():
        other.encoder.bert.encoder.layer[0].output.dense.weight.add_(0.01)
    with pytest.raises(ValueError, match="other weights"):
        PostVectors(other, prefix)
    with pytest.raises(ValueError, match="differ"):
        PostVectors(build_model(LearnSettings(max_len=32, freeze_layers=3)), prefix)


def test_a_training_length_cuts_the_states_above_the_bottom_and_only_there(model: torch.nn.Module) -> None:
    prefix = FrozenPrefix(model)
    lengths = [len(prefix.tokens(p)) for p in POSTS]
    assert max(lengths) > 8 > min(lengths)  # some posts are cut, one is not
    with torch.no_grad():
        whole = PostVectors(model, prefix, chunk_size=3)(POSTS)
        cut = PostVectors(model, prefix, chunk_size=3, truncate=8)(POSTS)
        wide = PostVectors(model, prefix, chunk_size=3, truncate=max(lengths))(POSTS)
        by_hand = PostVectors(model, prefix, chunk_size=3)._top([s[:8] for s in prefix.states(POSTS)])
    assert torch.equal(wide, whole)
    assert torch.allclose(cut, by_hand, atol=1e-6)
    for i, n in enumerate(lengths):
        same = torch.allclose(cut[i], whole[i], atol=1e-5)
        assert same == (n <= 8), (i, n)
    prefix.states(POSTS)
    assert all(s.shape[0] == n for s, n in zip(prefix.states(POSTS), lengths, strict=True))  # the cache stays whole


def test_a_training_length_must_keep_two_positions() -> None:
    from semdup.core.errors import ConfigError

    assert LearnSettings(train_len=128).train_len == 128
    with pytest.raises(ConfigError, match="train_len"):
        LearnSettings(train_len=1)
