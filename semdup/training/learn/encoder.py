"""A finished learn run's encoder, as the fit and gate tools take a bundle: ``encode_dense``, ``version``,
``dimension``.

``semdup learn`` scores every labelled query with the fold model that never saw it. Exporting each fold model to
ONNX only to score a few thousand posts would cost more than the scoring (and on a GPU machine onnxruntime may be
CPU-only); the torch model scores on the training device instead. The vectors are what the verified export gives
within its parity tolerance (mean pooling, L2-normalised, the same wordpieces), and the final model, the one that
ships, goes through the verified export.

A fold model's passes curve (:mod:`semdup.learn.pass_curve`) encodes most of the posts its out-of-fold scoring
encodes again after training, with the same weights: :class:`KnownVectors` keeps the curve's vectors by post, and a
:class:`LearnedEncoder` given them encodes only the posts they lack.

The same holds for the base encoder itself (:func:`base_encoder`): where its bundle is the pre-trained encoder the
recipe fine-tunes, at the same post length, its vectors are the shared frozen bottom plus its own top layers, a
third of a forward pass on MiniLM with 4 of 6 layers frozen instead of the whole ONNX pass.

Example::

    enc = LearnedEncoder("work/fold-0/checkpoint", device="cuda")
    enc.encode_dense(posts).shape   # (N, 384)
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from semdup.core.posts import Post
from semdup.core.text_pipeline import check_post
from semdup.training.checkpoint import WEIGHTS_FILE, load_checkpoint
from semdup.training.learn.frozen import FrozenPrefix, PostVectors, build_model
from semdup.training.learn.settings import LearnSettings
from semdup.training.models.minilm import MiniLM

__all__ = ["KnownVectors", "LearnedEncoder", "base_encoder", "post_key"]

logger = logging.getLogger(__name__)


def post_key(post: Post) -> str:
    """A post's id and text: a vector computed for a post stays its vector while neither changes."""
    return hashlib.sha256(json.dumps([post.id, post.title, post.body]).encode("utf-8")).hexdigest()[:24]


class KnownVectors:
    """Vectors one checkpoint already gave, by :func:`post_key`; saved beside its checkpoint as one ``.npz``."""

    def __init__(self, keys: Sequence[str], vectors: np.ndarray) -> None:
        self.row = {k: i for i, k in enumerate(keys)}
        if len(self.row) != len(keys) or len(keys) != len(vectors):
            raise ValueError(f"{len(self.row)} distinct keys of {len(keys)} for {len(vectors)} vectors")
        self.vectors = np.asarray(vectors, dtype=np.float32)

    @classmethod
    def of(cls, posts: Sequence[Post], vectors: np.ndarray) -> KnownVectors:
        """The vectors of ``posts``, each post once (a pool's query is often another query's candidate too)."""
        first: dict[str, int] = {}
        for i, p in enumerate(posts):
            first.setdefault(post_key(p), i)
        return cls(list(first), np.asarray(vectors)[list(first.values())])

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        keys = np.asarray(sorted(self.row, key=self.row.__getitem__))
        with path.open("wb") as f:  # np.savez would add ".npz" to a name without it
            np.savez(f, keys=keys, vectors=self.vectors)

    @classmethod
    def load(cls, path: Path) -> KnownVectors | None:
        """The vectors saved at ``path``; None where there are none (an older run's folder: they are encoded)."""
        if not path.exists():
            return None
        with np.load(path, allow_pickle=False) as z:
            return cls([str(k) for k in z["keys"]], z["vectors"])

    def __len__(self) -> int:
        return len(self.row)


class LearnedEncoder:
    """Unit dense vectors of a learn checkpoint on ``device`` (float32; posts encoded in length-sorted chunks, the
    frozen bottom read from ``prefix`` when one is given: it must be the checkpoint's own). ``known``: vectors this
    checkpoint already gave (:class:`KnownVectors`), taken as they are instead of encoded again."""

    def __init__(self, checkpoint_dir: str | Path | None, device: str = "cpu", chunk_size: int = 64,
                 prefix: FrozenPrefix | None = None, model: MiniLM | None = None, version: str = "",
                 known: KnownVectors | None = None) -> None:
        if checkpoint_dir is not None:
            folder = Path(checkpoint_dir)
            model, _, _ = load_checkpoint(folder)
            version = "learned-" + hashlib.sha256((folder / WEIGHTS_FILE).read_bytes()).hexdigest()[:12]
        if model is None or not version:
            raise ValueError("give a checkpoint folder, or a model and the version that names its weights")
        self.model = model.to(device).eval()
        self._vectors = PostVectors(self.model, prefix, chunk_size)
        self.dimension: int | None = int(self.model.dim)
        self.version = version  # names the weights: the dense-vector cache keys on it
        self.known = known

    def encode_dense(self, posts: Sequence[Post]) -> np.ndarray:
        """L2-normalised vectors [N, D] float32.

        Raises:
            PostError: a post with neither title nor body, or binary text.
        """
        for p in posts:
            check_post(p)
        out = np.zeros((len(posts), self.dimension or 0), dtype=np.float32)
        rows = [None if self.known is None else self.known.row.get(post_key(p)) for p in posts]
        todo = [i for i, r in enumerate(rows) if r is None]
        for i, r in enumerate(rows):
            if r is not None:
                out[i] = self.known.vectors[r]  # type: ignore[union-attr]
        if todo:
            with torch.no_grad():
                out[todo] = self._vectors([posts[i] for i in todo]).cpu().numpy()
        return out


def base_encoder(bundle: Any, settings: LearnSettings, prefix: FrozenPrefix | None, device: str = "cpu") -> Any:
    """The base bundle's encoder as the fit and gate tools take it: through ``prefix`` when the bundle is the
    pre-trained encoder the recipe fine-tunes at the same post length, in full precision (the module doc), else
    the bundle itself (its ONNX encoder)."""
    manifest = bundle.manifest
    same = (prefix is not None and bundle.arch == "minilm" and not manifest.get("quantization")
            and (manifest.get("base_encoder") or {}).get("name") == settings.base_encoder
            and int((manifest.get("tokenizer") or {}).get("max_len", -1)) == prefix.max_len)
    if not same:
        return bundle
    return LearnedEncoder(None, device, prefix=prefix, model=build_model(settings), version=bundle.version)
