"""Input kinds and their batch builders: the one place posts become model input arrays.

Torch-free (numpy only) on purpose: training, the ONNX parity check, Celery workers and the
reranker all call :func:`build_inputs`, so the ids a model was trained on are the ids it is
served with. Each architecture names one input kind (``ArchSpec.input_kind``):

==================  ==========================================  ==================================
kind                arrays (int64)                              read by
==================  ==========================================  ==================================
``text_ids``        ``ids`` [B, L]                               BOW-CNN, CNN (title + body)
``title_body_ids``  ``title_ids`` [B, Lt], ``body_ids`` [B, Lb]  RCNN (title and body apart)
``trigram_ids``     ``trigram_ids`` [B, L, T]                    SCQA (letter-trigram hashing)
==================  ==========================================  ==================================

Padding is id 0 (``PAD_ID``) everywhere. ``L`` is the longest sequence in the batch, cut to the
pipeline's ``max_tokens`` and never below :data:`MIN_LENGTH` so a width-3 convolution always
has a window. ``T`` is the pipeline's ``max_trigrams_per_word``.

Models with a bag-of-words path (BOW-CNN, bow-minilm) also need ``bow_ids``: the vocabulary ids
of :meth:`TextPipeline.text_tokens`, the same tokens :meth:`TextPipeline.term_frequencies`
counts at serving time. :func:`build_inputs` adds them with ``with_bow=True``.

Another input kind (for example a sub-word tokenizer's ids) is added with
:func:`register_input_kind`.

Example::

    >>> from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary
    >>> p = TextPipeline(TextPipelineSettings(), Vocabulary.build([["how", "mount"]]))
    >>> build_inputs("text_ids", p, [Post("1", "How mount")])["ids"].tolist()
    [[2, 3, 0]]
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from semdup.core.errors import ConfigError
from semdup.core.posts import Post
from semdup.core.text_pipeline import PAD_ID, TextPipeline

__all__ = [
    "MIN_LENGTH",
    "InputKind",
    "INPUT_KINDS",
    "register_input_kind",
    "input_names",
    "build_inputs",
    "pad_sequences",
    "text_ids",
    "title_body_ids",
    "trigram_ids",
    "bow_ids",
]

logger = logging.getLogger(__name__)

MIN_LENGTH = 3


@dataclass(frozen=True)
class InputKind:
    """One way of turning posts into arrays.

    Args:
        name: the kind's name, stored in checkpoints and bundles.
        names: the array names, in the order the dense encoder's ``forward`` takes them
            (and the ONNX graph's input names).
        build: ``(pipeline, posts) -> dict[name, int64 array]``.
    """

    name: str
    names: tuple[str, ...]
    build: Callable[[TextPipeline, Sequence[Post]], dict[str, np.ndarray]]


def pad_sequences(seqs: Sequence[Sequence[int]], max_len: int, min_len: int = MIN_LENGTH) -> np.ndarray:
    """Right-pad id lists with ``PAD_ID`` into an int64 [B, L] array, L = clamp(longest, min_len, max_len)."""
    longest = max((len(s) for s in seqs), default=0)
    length = max(min_len, min(longest, max_len))
    out = np.full((len(seqs), length), PAD_ID, dtype=np.int64)
    for i, s in enumerate(seqs):
        s = s[:length]
        out[i, : len(s)] = s
    return out


def text_ids(pipeline: TextPipeline, posts: Sequence[Post]) -> dict[str, np.ndarray]:
    """Title + body vocabulary ids, ``{"ids": [B, L]}``."""
    seqs = [pipeline.ids(pipeline.text_tokens(p)) for p in posts]
    return {"ids": pad_sequences(seqs, pipeline.settings.max_tokens)}


def bow_ids(pipeline: TextPipeline, posts: Sequence[Post]) -> dict[str, np.ndarray]:
    """The ids the BOW path counts (same tokens as ``term_frequencies(text_tokens(post))``)."""
    return {"bow_ids": text_ids(pipeline, posts)["ids"]}


def title_body_ids(pipeline: TextPipeline, posts: Sequence[Post]) -> dict[str, np.ndarray]:
    """Title and body ids apart, ``{"title_ids": [B, Lt], "body_ids": [B, Lb]}``."""
    titles, bodies = [], []
    for p in posts:
        t, b = pipeline.post_tokens(p)
        titles.append(pipeline.ids(t))
        bodies.append(pipeline.ids(b))
    m = pipeline.settings.max_tokens
    return {"title_ids": pad_sequences(titles, m), "body_ids": pad_sequences(bodies, m)}


def trigram_ids(pipeline: TextPipeline, posts: Sequence[Post]) -> dict[str, np.ndarray]:
    """Letter-trigram hash ids per word, ``{"trigram_ids": [B, L, T]}``, T = max_trigrams_per_word."""
    s = pipeline.settings
    words = [pipeline.trigram_ids(pipeline.text_tokens(p)) for p in posts]
    longest = max((len(w) for w in words), default=0)
    length = max(MIN_LENGTH, min(longest, s.max_tokens))
    out = np.full((len(posts), length, s.max_trigrams_per_word), PAD_ID, dtype=np.int64)
    for i, ws in enumerate(words):
        for j, grams in enumerate(ws[:length]):
            out[i, j, : len(grams)] = grams
    return {"trigram_ids": out}


INPUT_KINDS: dict[str, InputKind] = {}


def register_input_kind(kind: InputKind) -> InputKind:
    """Add an input kind (another helper's tokenizer, say); re-registering the same name replaces it."""
    INPUT_KINDS[kind.name] = kind
    return kind


register_input_kind(InputKind("text_ids", ("ids",), text_ids))
register_input_kind(InputKind("title_body_ids", ("title_ids", "body_ids"), title_body_ids))
register_input_kind(InputKind("trigram_ids", ("trigram_ids",), trigram_ids))


# Kinds that live in their own module (and import this one to register): loaded on first use, so serving code
# that only imports this module can build them without an import cycle.
_LAZY_KINDS = {"wordpiece": "semdup.core.wordpiece"}


def _kind(name: str) -> InputKind:
    if name not in INPUT_KINDS and name in _LAZY_KINDS:
        importlib.import_module(_LAZY_KINDS[name])
    try:
        return INPUT_KINDS[name]
    except KeyError:
        raise ConfigError(f"unknown input kind {name!r}; known kinds: {sorted(INPUT_KINDS)}") from None


def input_names(kind: str) -> tuple[str, ...]:
    """The dense encoder's input names for ``kind``, in forward order (also the ONNX input names)."""
    return _kind(kind).names


def build_inputs(
    kind: str, pipeline: TextPipeline, posts: Sequence[Post], with_bow: bool = False
) -> dict[str, np.ndarray]:
    """Arrays for ``posts`` as the architecture's dense encoder reads them (plus ``bow_ids`` if asked).

    Args:
        kind: an input kind name (see the module table).
        pipeline: the checkpoint's or bundle's text pipeline (with its vocabulary).
        posts: the posts of one batch; at least one.
        with_bow: also return ``bow_ids`` for a bag-of-words path.

    Returns:
        ``{name: int64 array}`` with one row per post.

    Raises:
        ConfigError: unknown kind.
    """
    spec = _kind(kind)
    arrays = spec.build(pipeline, posts)
    if with_bow:
        # text_ids already holds exactly the BOW tokens' ids; other kinds tokenise once more.
        arrays["bow_ids"] = arrays["ids"] if kind == "text_ids" else bow_ids(pipeline, posts)["bow_ids"]
    return arrays
