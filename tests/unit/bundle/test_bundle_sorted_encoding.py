"""Length-sorted encoding of wordpiece bundles: vectors come back in input order, equal to post-by-post encoding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from tokenizers.processors import TemplateProcessing

from semdup.bundle.bundle import WORDPIECE_BATCH, Bundle
from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary
from semdup.core.wordpiece import attach_wordpiece

WORDS = [f"w{i}" for i in range(40)]


class RecordingSession:
    """A stand-in encoder whose output per row depends only on that row's real tokens (as attention masking
    makes a transformer's): [Σ ids, length, Σ ids²] over the masked positions. Records each batch's shape."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int, list[int]]] = []

    def run(self, outputs: list[str], feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        ids, mask = feed["input_ids"].astype(np.float64), feed["attention_mask"]
        self.batches.append((ids.shape[0], ids.shape[1], mask.sum(axis=1).tolist()))
        out = np.stack([(ids * mask).sum(1), mask.sum(1), (ids * ids * mask).sum(1)], axis=1)
        return [out.astype(np.float32)]


def _tokenizer() -> Tokenizer:
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, **{w: i + 4 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.post_processor = TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.enable_truncation(max_length=24)
    return tok


def _bundle(session: Any) -> Bundle:
    pipeline = attach_wordpiece(TextPipeline(TextPipelineSettings(), Vocabulary.build([])), _tokenizer())
    manifest = {
        "version": "minilm-test",
        "architecture": "minilm",
        "dimension": 3,
        "threshold": None,
        "input_kind": "wordpiece",
        "fusion": {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.0},
    }
    return Bundle(Path("test"), manifest, pipeline, None, session)


def _posts(n: int, seed: int = 0) -> list[Post]:
    """Posts of 1 to 40 words (some cut at 24 wordpieces), lengths in no order."""
    rng = np.random.default_rng(seed)
    return [Post(str(i), " ".join(rng.choice(WORDS, size=int(rng.integers(1, 41)))), "") for i in range(n)]


@pytest.mark.parametrize("n", [1, 7, 32, 50])
def test_sorted_batches_give_each_post_its_own_vector_in_input_order(n: int) -> None:
    posts = _posts(n, seed=n)
    session = RecordingSession()
    bundle = _bundle(session)
    fields = bundle.document_fields(posts)
    one_by_one = np.concatenate([bundle.encode_dense([p]) for p in posts])
    # exact: the stand-in's outputs are small integers, whatever the batch, and each row is normalised on its own
    np.testing.assert_array_equal(np.asarray([f["vector"] for f in fields], dtype=np.float32), one_by_one)
    # and each is its own post's: [Σ ids, length, Σ ids²] of its wordpieces ([CLS] … [SEP], cut at 24), normalised
    ids = [np.asarray(_tokenizer().encode(p.title).ids, dtype=np.float64) for p in posts]
    raw = np.asarray([[x.sum(), len(x), (x * x).sum()] for x in ids])
    np.testing.assert_allclose(one_by_one, raw / np.linalg.norm(raw, axis=1, keepdims=True), rtol=1e-6)


def test_batches_are_length_sorted_and_padded_to_their_own_longest() -> None:
    session = RecordingSession()
    _bundle(session).encode_dense(_posts(32))
    assert [b[0] for b in session.batches] == [WORDPIECE_BATCH] * (32 // WORDPIECE_BATCH)
    widths = [b[1] for b in session.batches]
    assert widths == sorted(widths, reverse=True)
    for _, width, lengths in session.batches:
        assert width == max(lengths) and lengths == sorted(lengths, reverse=True)


def test_explicit_batch_size_is_kept() -> None:
    session = RecordingSession()
    _bundle(session).encode_dense(_posts(10), batch_size=4)
    assert [b[0] for b in session.batches] == [4, 4, 2]
