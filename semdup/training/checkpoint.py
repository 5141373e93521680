"""Checkpoint directories: what training writes and export, evaluation and ``CheckpointScorer`` read.

Layout of ``DIR``::

    config.json    arch, hparams, loss, input kind, text-pipeline settings, fusion weights,
                   decision threshold, seeds, training settings, data used, library versions
    vocab.json     the vocabulary (Vocabulary.save), with document frequencies
    model.pt       the model's state_dict (torch.save)
    metrics.json   dev and test figures (written by the trainer at the end)

``load_checkpoint(DIR) -> (model, pipeline, config)`` rebuilds the model through its registered
architecture and refuses a directory whose pieces disagree (vocabulary size vs. weights, missing
files), naming both values.
"""

from __future__ import annotations

import json
import logging
import platform
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch

from semdup.core.errors import BundleError, SemdupError
from semdup.core.inputs import build_inputs, input_names
from semdup.core.posts import Post
from semdup.core.progress import progress
from semdup.core.scoring import EncodingScorer, bow_matrix
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary, check_post
from semdup.training.models._base import EncoderModel
from semdup.training.registry import get_arch

__all__ = [
    "CONFIG_FILE",
    "VOCAB_FILE",
    "WEIGHTS_FILE",
    "METRICS_FILE",
    "library_versions",
    "save_checkpoint",
    "load_checkpoint",
    "write_metrics",
    "CheckpointScorer",
]

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.json"
WEIGHTS_FILE = "model.pt"
METRICS_FILE = "metrics.json"
FORMAT_VERSION = 1


def library_versions() -> dict[str, str]:
    """Versions of the libraries that change a score (recorded in every checkpoint)."""
    out = {"python": platform.python_version()}
    for name in ("semdup", "torch", "numpy", "regex", "tokenizers", "onnx", "onnxruntime"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


# config.json keys save_checkpoint derives from the model, pipeline and libraries (the rest comes from ``extra``)
DERIVED_CONFIG_KEYS = (
    "format_version", "arch", "input_kind", "hparams", "pipeline", "vocab_size", "fusion", "versions"
)


def save_checkpoint(
    out_dir: str | Path,
    model: EncoderModel,
    arch: str,
    pipeline: TextPipeline,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write config.json, vocab.json and model.pt into ``out_dir`` (created if needed).

    Args:
        out_dir: the checkpoint directory.
        model: the trained model.
        arch: its registered architecture name.
        pipeline: the text pipeline with the vocabulary the model was trained with.
        extra: more config entries (threshold, seeds, training settings, data, loss ...).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if pipeline.vocab is None:
        raise BundleError("cannot save a checkpoint without a vocabulary in the text pipeline")
    config: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "arch": arch,
        "input_kind": model.input_kind,
        "hparams": model.get_config_dict(),
        "pipeline": pipeline.settings.to_dict(),
        "vocab_size": len(pipeline.vocab),
        "fusion": model.fusion(),
        "threshold": None,
        "versions": library_versions(),
    }
    config.update(extra or {})
    tmp = out / (WEIGHTS_FILE + ".tmp")
    torch.save(model.state_dict(), tmp)
    tmp.replace(out / WEIGHTS_FILE)
    pipeline.vocab.save(out / VOCAB_FILE)
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True), encoding="utf-8")
    logger.info("saved %s checkpoint to %s", arch, out)
    return out


def write_metrics(out_dir: str | Path, metrics: Mapping[str, Any]) -> None:
    """Write metrics.json (dev/test figures) beside the checkpoint."""
    Path(out_dir, METRICS_FILE).write_text(json.dumps(metrics, indent=2, sort_keys=True), encoding="utf-8")


def read_config(ckpt_dir: str | Path) -> dict[str, Any]:
    """The checkpoint's config.json as a dict."""
    path = Path(ckpt_dir, CONFIG_FILE)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise BundleError(
            f"{ckpt_dir} is not a semdup checkpoint: no {CONFIG_FILE}; train one with 'semdup train'"
        ) from exc
    except ValueError as exc:
        raise BundleError(f"{path} is not valid JSON: {exc}") from exc


def load_checkpoint(ckpt_dir: str | Path) -> tuple[EncoderModel, TextPipeline, dict[str, Any]]:
    """Rebuild (model in eval mode, text pipeline with vocabulary, config) from a checkpoint directory."""
    d = Path(ckpt_dir)
    config = read_config(d)
    try:
        spec = get_arch(config["arch"])
        settings = TextPipelineSettings.from_dict(config["pipeline"])
    except KeyError as exc:
        raise BundleError(f"{d / CONFIG_FILE} lacks the entry {exc}; the checkpoint is incomplete") from exc
    except SemdupError as exc:
        raise BundleError(f"checkpoint {d}: {exc}") from exc
    vocab = Vocabulary.load(d / VOCAB_FILE)
    if len(vocab) != config.get("vocab_size", len(vocab)):
        raise BundleError(f"{d}: config says vocab_size={config['vocab_size']} but vocab.json has {len(vocab)} tokens")
    pipeline = TextPipeline(settings, vocab)
    model = spec.model_class.from_hparams(config.get("hparams", {}), pipeline, pretrained=False)
    try:
        state = torch.load(d / WEIGHTS_FILE, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
    except FileNotFoundError as exc:
        raise BundleError(f"{d} has no {WEIGHTS_FILE}; the checkpoint is incomplete") from exc
    except RuntimeError as exc:
        raise BundleError(
            f"{d / WEIGHTS_FILE} does not fit a {config['arch']} model built from config.json: {exc}"
        ) from exc
    model.eval()
    return model, pipeline, config


class CheckpointScorer(EncodingScorer):
    """:class:`semdup.core.scoring.PostScorer` over a torch checkpoint: batched, no_grad, on the model's device.

    Scores follow the contract s = β_bow·cos_bow + β_dense·cos_dense + α·lexnorm, with cos_bow
    computed torch-free from the term weights exactly as serving does.

    Example::

        scorer = CheckpointScorer.from_dir("artifacts/bow-cnn-travel")
        scorer.score(query, candidates)  # np.ndarray [len(candidates)]
    """

    def __init__(
        self,
        model: EncoderModel,
        pipeline: TextPipeline,
        config: Mapping[str, Any] | None = None,
        batch_size: int = 64,
        progress: bool = False,
    ) -> None:
        self.model = model.eval()
        self.pipeline = pipeline
        self.config = dict(config or {})
        self.batch_size = batch_size
        self.progress = progress
        self.fusion = model.fusion()
        self._t = model.term_weights()
        self._dense = model.dense_encoder()

    @classmethod
    def from_dir(cls, ckpt_dir: str | Path, batch_size: int = 64, progress: bool = False) -> CheckpointScorer:
        model, pipeline, config = load_checkpoint(ckpt_dir)
        return cls(model, pipeline, config, batch_size=batch_size, progress=progress)

    @property
    def threshold(self) -> float | None:
        """The duplicate decision threshold chosen in training (None if none was chosen)."""
        t = self.config.get("threshold")
        return None if t is None else float(t)

    def encode(self, posts: Sequence[Post]) -> tuple[np.ndarray | None, Any]:
        """(dense [N, D] or None, L2-normalised BOW CSR [N, |V|] or None)."""
        for p in posts:
            check_post(p)
        dense = None
        if self._dense is not None:
            chunks = []
            starts = range(0, len(posts), self.batch_size)
            with torch.no_grad():
                for i in progress(starts, desc="encode", unit="batch", enabled=self.progress):
                    arrays = build_inputs(self.model.input_kind, self.pipeline, posts[i : i + self.batch_size])
                    device = next(self._dense.parameters()).device  # CPU, or the GPU a training run is on
                    tensors = {k: torch.from_numpy(v).to(device) for k, v in arrays.items()}
                    names = input_names(self.model.input_kind)
                    chunks.append(self._dense(*[tensors[n] for n in names]).float().cpu().numpy())
            dense = np.concatenate(chunks) if chunks else np.zeros((0, 0), dtype=np.float32)
        bow = bow_matrix(self.pipeline, posts, self._t) if self._t is not None else None
        return dense, bow

