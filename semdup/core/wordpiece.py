"""The ``wordpiece`` input kind: a base encoder's own WordPiece ids (MiniLM, MPNet), built without torch.

Serving (Celery workers, the reranker) must tokenise exactly as training did but may not import
torch or transformers. The Hugging Face ``tokenizers`` package reads the model's
``tokenizer.json`` alone (Rust, no torch), and is the same code transformers' fast tokenizer
runs, so the ids are identical (``tests/unit/training/test_minilm.py`` checks this).

The text fed to the tokenizer is the post's title and body cleaned by the shared
:func:`~semdup.core.text_pipeline.clean_text` (HTML and code blocks stripped, URLs
replaced), joined by a space; lower-casing is the tokenizer's own (BertNormalizer).

Special tokens come from the tokenizer.json's post-processor (``[CLS] … [SEP]`` for MiniLM's BERT,
``<s> … </s>`` for MPNet's RoBERTa-style one) and count towards ``max_len``; padding uses the tokenizer's own
pad token (``[PAD]`` = 0, ``<pad>`` = 1), as sentence-transformers' ``encode`` does.

A pipeline serves this kind once a tokenizer is attached to it::

    >>> tok = load_wordpiece_tokenizer("model/tokenizer.json", max_len=128)
    >>> attach_wordpiece(pipeline, tok)
    >>> build_inputs("wordpiece", pipeline, posts)   # {"input_ids": [B, L], "attention_mask": [B, L]}
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from semdup.core.errors import ConfigError, DataError
from semdup.core.inputs import InputKind, register_input_kind
from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, clean_text

__all__ = [
    "WORDPIECE_NAMES",
    "load_wordpiece_tokenizer",
    "wordpiece_text",
    "wordpiece_inputs",
    "wordpiece_sequences",
    "pad_id",
    "attach_wordpiece",
]

logger = logging.getLogger(__name__)

WORDPIECE_NAMES = ("input_ids", "attention_mask")
_ATTR = "wordpiece_tokenizer"


def load_wordpiece_tokenizer(path: str | Path, max_len: int = 128) -> Any:
    """A ``tokenizers.Tokenizer`` from ``tokenizer.json``, truncating to ``max_len`` wordpieces (with [CLS]/[SEP]).

    Padding is switched off here: :func:`wordpiece_inputs` pads to the longest post of a batch.
    """
    if max_len < 3:
        raise ValueError(f"max_len must be at least 3 wordpieces ([CLS] x [SEP]); got {max_len}")
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise ImportError(
            'the wordpiece input kind needs the tokenizers package: pip install "tokenizers>=0.15"'
        ) from exc
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises plain Exception subclasses from Rust
        raise DataError(f"cannot read the wordpiece tokenizer {path}: {exc}; expected a tokenizer.json") from exc
    tok.no_padding()
    tok.enable_truncation(max_length=int(max_len))
    return tok


def wordpiece_text(post: Post, settings: TextPipelineSettings) -> str:
    """Title and body, cleaned by the shared pipeline, joined by one space."""
    parts = [clean_text(post.title or "", settings), clean_text(post.body or "", settings)]
    return " ".join(p for p in parts if p)


def wordpiece_inputs(
    tokenizer: Any, posts: Sequence[Post], max_len: int | None = None, settings: TextPipelineSettings | None = None
) -> dict[str, np.ndarray]:
    """``{"input_ids", "attention_mask"}`` int64 [B, L] for ``posts``, L = the batch's longest (≤ max_len).

    Args:
        tokenizer: from :func:`load_wordpiece_tokenizer` (its truncation applies).
        posts: one batch of posts.
        max_len: optional tighter cut in wordpieces; the last kept piece is replaced by [SEP].
        settings: text-cleaning settings (default :class:`TextPipelineSettings`).
    """
    settings = settings or TextPipelineSettings()
    seqs = wordpiece_sequences(tokenizer, [wordpiece_text(p, settings) for p in posts])
    if max_len is not None:
        sep = seqs[0][-1] if seqs and seqs[0] else 0
        seqs = [s if len(s) <= max_len else s[: max_len - 1] + [sep] for s in seqs]
    length = max((len(s) for s in seqs), default=1)
    ids = np.full((len(seqs), length), pad_id(tokenizer), dtype=np.int64)
    mask = np.zeros((len(seqs), length), dtype=np.int64)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
        mask[i, : len(s)] = 1
    return {"input_ids": ids, "attention_mask": mask}


def wordpiece_sequences(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """Each text's wordpiece ids, real tokens only (whatever padding the tokenizer.json asks for: MiniLM's pads
    every text to 128), cut by the tokenizer's truncation. One ``encode_batch`` call: the Rust tokenizer encodes
    the texts on all cores and releases the GIL meanwhile."""
    encs = tokenizer.encode_batch(list(texts))
    return [e.ids[: sum(e.attention_mask)] for e in encs]


def pad_id(tokenizer: Any) -> int:
    """The tokenizer's padding id: ``<pad>`` (MPNet, 1) or ``[PAD]`` (BERT vocabularies, 0); 0 if it has neither.

    ``<pad>`` first: MPNet's vocabulary also holds BERT's ``[PAD]`` (id 4) as an ordinary token.
    """
    for token in ("<pad>", "[PAD]"):
        found = tokenizer.token_to_id(token)
        if found is not None:
            return int(found)
    return 0


def attach_wordpiece(pipeline: TextPipeline, tokenizer: Any) -> TextPipeline:
    """Give ``pipeline`` the tokenizer the ``wordpiece`` input kind uses; returns the pipeline."""
    setattr(pipeline, _ATTR, tokenizer)
    return pipeline


def _build(pipeline: TextPipeline, posts: Sequence[Post]) -> dict[str, np.ndarray]:
    tok = getattr(pipeline, _ATTR, None)
    if tok is None:
        raise ConfigError(
            "the wordpiece input kind needs a tokenizer on the text pipeline; load the bundle's tokenizer.json "
            "with load_wordpiece_tokenizer() and call attach_wordpiece(pipeline, tokenizer)"
        )
    return wordpiece_inputs(tok, posts, settings=pipeline.settings)


register_input_kind(InputKind("wordpiece", WORDPIECE_NAMES, _build))
