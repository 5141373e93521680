"""Tiny untrained checkpoints of every paper architecture, shared by the export, indexer and reranker tests:
the export path, dynamic axes and the scoring contract are what they check, not model quality."""

from __future__ import annotations

from pathlib import Path

import torch

from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary
from semdup.training.checkpoint import save_checkpoint
from semdup.training.registry import get_arch

TINY: dict[str, tuple[dict, dict]] = {
    "bow-cnn": ({"emb_dim": 8, "conv_units": 16, "word_vectors": "none"}, {}),
    "cnn": ({"emb_dim": 8, "conv_units": 16, "word_vectors": "none"}, {}),
    "scqa": ({"trigram_dim": 8, "conv_units": 16, "out_dim": 12}, {"trigram_buckets": 500}),
    "rcnn": ({"emb_dim": 8, "hidden_dim": 16, "word_vectors": "none"}, {"max_tokens": 60}),
}



def tiny_checkpoint(arch: str, posts: list[Post], out: Path, seed: int = 0) -> Path:
    """An untrained checkpoint of ``arch`` whose vocabulary comes from half the posts (the rest hit <unk>)."""
    torch.manual_seed(seed)
    hparams, settings = TINY[arch]
    base = TextPipeline(TextPipelineSettings(**settings))
    vocab = Vocabulary.build(base.text_tokens(p) for p in posts[: len(posts) // 2])
    pipeline = TextPipeline(base.settings, vocab)
    model = get_arch(arch).model_class.from_hparams(hparams, pipeline, pretrained=False)
    if model.uses_bow:  # learned weights move away from IDF; make them differ per token
        with torch.no_grad():
            model.term_weight.mul_(torch.rand_like(model.term_weight) + 0.5)
    return save_checkpoint(out, model, arch, pipeline, {"threshold": 0.5, "data": {"source": "test"}})
