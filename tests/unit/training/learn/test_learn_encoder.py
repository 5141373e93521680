"""A learned encoder takes the vectors its checkpoint already gave (the passes curve's) as they are, and encodes
only the posts they lack: a post whose text changed since is encoded again."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from semdup.core.posts import Post
from semdup.training.learn.encoder import KnownVectors, LearnedEncoder, post_key
from semdup.training.learn.frozen import FrozenPrefix, build_model
from semdup.training.learn.settings import LearnSettings

SETTINGS = LearnSettings(max_len=32, freeze_layers=4)
POSTS = [Post("a", "how do I sort a list", "in place"), Post("b", "python list sorting", ""),
         Post("c", "unrelated question about tea", "green or black")]


def test_known_vectors_are_taken_as_they_are_and_the_rest_encoded(tmp_path: Path) -> None:
    model = build_model(SETTINGS)
    fresh = LearnedEncoder(None, model=model, version="v", prefix=FrozenPrefix.for_settings(SETTINGS))
    want = fresh.encode_dense(POSTS)
    marker = np.full((1, want.shape[1]), 0.5, dtype=np.float32)
    KnownVectors.of(POSTS[1:2], marker).save(tmp_path / "known.npz")
    known = KnownVectors.load(tmp_path / "known.npz")
    assert known is not None and len(known) == 1
    enc = LearnedEncoder(None, model=model, version="v", prefix=fresh._vectors.prefix, known=known)
    got = enc.encode_dense(POSTS)
    np.testing.assert_array_equal(got[1], marker[0])  # taken, not encoded
    np.testing.assert_allclose(got[[0, 2]], want[[0, 2]], atol=1e-6)
    edited = [POSTS[0], Post("b", "python list sorting", "edited since"), POSTS[2]]
    np.testing.assert_allclose(enc.encode_dense(edited)[1], fresh.encode_dense(edited[1:2])[0], atol=1e-6)
    assert KnownVectors.load(tmp_path / "none.npz") is None  # an older run's folder: everything is encoded


def test_a_post_given_twice_is_kept_once() -> None:
    """A pool's query is often another query's candidate: the curve encodes it twice, the vectors keep it once."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    known = KnownVectors.of([POSTS[0], POSTS[1], POSTS[0]], x)
    assert len(known) == 2 and known.vectors.shape == (2, 4)
    np.testing.assert_array_equal(known.vectors[known.row[post_key(POSTS[0])]], x[0])
