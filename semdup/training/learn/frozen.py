"""The frozen bottom of the encoder, computed once per post and shared by every step, fold model and scoring pass.

A learn recipe keeps the embeddings and the bottom ``freeze_layers`` transformer layers fixed
(:class:`~semdup.training.learn.settings.LearnSettings`). Their output for a post is therefore the same in every
step, in every fold model and in the final model: :class:`FrozenPrefix` computes it once per post (the token states
after the frozen layers, [L, D], no padding; float16 on the CPU, or on the GPU where it trains) and
:class:`PostVectors` runs only the layers that learn on top of it:

    E(p) = mean_pool( top_θ( bottom(p) ) ),   bottom(p) computed once, top_θ the trainable layers

Before, every step ran the bottom again for each of its ~96 posts (in train mode, so with dropout in the frozen
layers too). The bottom now runs in eval mode, without dropout: that is the one change to the recipe, and its
out-of-fold figures are in docs/results.md (issue #33). A model's vectors are those of its full forward pass in
eval mode, within the float16 rounding of the stored states (about 1e-3 of a cosine). The bottom's weights are
checked to be the same tensors in every model that uses the cache (:meth:`FrozenPrefix.check`), so a model with
other frozen weights never reads states that are not its own.

Example::

    prefix = FrozenPrefix.for_settings(LearnSettings(freeze_layers=4, max_len=128), device="cpu")
    vectors = PostVectors(model, prefix)        # model: the MiniLM being trained (same base, same freeze)
    vectors(posts).shape                        # (N, 384), differentiable through the top layers
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
from torch import nn

from semdup.core.posts import Post
from semdup.training.learn.settings import LearnSettings
from semdup.training.learn.step import encode_sorted
from semdup.training.models.minilm import MiniLM, compute_mean_pool

__all__ = ["FrozenPrefix", "PostVectors", "Tokens", "build_model"]

logger = logging.getLogger(__name__)

_Key = tuple[str, str, str]


def build_model(settings: LearnSettings) -> MiniLM:
    """The pre-trained encoder of ``settings`` (dense only), its bottom frozen as the recipe says."""
    from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary

    pipeline = TextPipeline(TextPipelineSettings(), Vocabulary.build([]))  # dense only: <pad>/<unk>
    hparams = {"base_encoder": settings.base_encoder, "max_len": settings.max_len,
               "freeze_layers": settings.freeze_layers}
    return MiniLM.from_hparams(hparams, pipeline, pretrained=True)


class Tokens:
    """Each post's wordpiece ids, computed once (by the one tokenisation serving uses). Keyed by the text as well
    as the id: the title term encodes a post's title alone under the post's own id."""

    def __init__(self, model: MiniLM) -> None:
        from semdup.core.wordpiece import pad_id

        self.tokenizer = model.tokenizer
        self.settings = model.pipeline.settings
        self.pad = pad_id(self.tokenizer)
        self._cache: dict[_Key, list[int]] = {}

    def __call__(self, post: Post) -> list[int]:
        from semdup.core.wordpiece import wordpiece_inputs

        key = (post.id, post.title, post.body)
        got = self._cache.get(key)
        if got is None:
            arrays = wordpiece_inputs(self.tokenizer, [post], settings=self.settings)
            got = self._cache[key] = arrays["input_ids"][0].tolist()
        return got


def _layer_mask(bert: nn.Module, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
    """The attention mask the encoder's layers take, built as the model's own forward pass builds it: for its
    attention implementation (sdpa: boolean or none without padding; eager: additive) in transformers 5, the
    additive [b, 1, 1, L] mask before."""
    try:
        from transformers.masking_utils import create_bidirectional_mask
    except ImportError:  # transformers 4
        return bert.get_extended_attention_mask(mask, mask.shape)
    return create_bidirectional_mask(config=bert.config, inputs_embeds=hidden, attention_mask=mask)


def _run_layers(bert: nn.Module, layers: Sequence[nn.Module], hidden: torch.Tensor, mask: torch.Tensor
                ) -> torch.Tensor:
    """Token states [b, L, D] after ``layers`` of ``bert`` applied to ``hidden`` (BERT-style and MPNet layers)."""
    ext = _layer_mask(bert, hidden, mask)
    position_bias = None
    if hasattr(bert.encoder, "compute_position_bias"):  # MPNet: relative position bias from the length alone
        position_bias = bert.encoder.compute_position_bias(hidden)
    for layer in layers:
        out = layer(hidden, ext) if position_bias is None else layer(hidden, ext, position_bias)
        hidden = out[0] if isinstance(out, tuple) else out
    return hidden


class FrozenPrefix:
    """Token states after the frozen bottom of ``settings``' encoder, per post, computed once (see the module doc).

    Args:
        model: a model of the recipe (its bottom is copied; the model itself is not kept).
        device: where the bottom runs and the states are kept.
        chunk_size: posts per forward pass when filling the cache.
    """

    def __init__(self, model: MiniLM, device: str = "cpu", chunk_size: int = 64) -> None:
        self.n_layers = int(model.hparams["freeze_layers"])
        self.max_len = int(model.hparams["max_len"])
        if self.n_layers < 1:
            raise ValueError("a frozen prefix needs freeze_layers >= 1 (with 0 the embeddings learn too)")
        bert = model.encoder.bert
        self.embeddings = _copy(bert.embeddings).to(device).eval()
        self.layers = nn.ModuleList(_copy(layer) for layer in bert.encoder.layer[: self.n_layers]).to(device).eval()
        self._bert = bert  # for the mask and position bias (no weights read from it after this)
        self.tokens = Tokens(model)
        self.device = device
        self.chunk_size = chunk_size
        self.dtype = torch.float16
        self._states: dict[_Key, torch.Tensor] = {}

    @classmethod
    def for_settings(cls, settings: LearnSettings, device: str = "cpu") -> FrozenPrefix:
        """The prefix of a fresh pre-trained model of ``settings``."""
        return cls(build_model(settings), device)

    def __len__(self) -> int:
        return len(self._states)

    def check(self, model: MiniLM) -> None:
        """Refuse a model whose frozen bottom is not this prefix's (other weights, layers or lengths).

        Raises:
            ValueError: the model's frozen bottom differs.
        """
        bert = model.encoder.bert
        if int(model.hparams["freeze_layers"]) != self.n_layers or int(model.hparams["max_len"]) != self.max_len:
            raise ValueError("the model's frozen layers or post length differ from the cached prefix's")
        mine = [*self.embeddings.parameters(), *self.layers.parameters()]
        theirs = [*bert.embeddings.parameters(), *(p for la in bert.encoder.layer[: self.n_layers]
                                                   for p in la.parameters())]
        if len(mine) != len(theirs) or not all(torch.equal(a, b.to(a.device)) for a, b in zip(mine, theirs,
                                                                                                 strict=True)):
            raise ValueError("the model's frozen layers hold other weights than the cached prefix's")

    @torch.no_grad()
    def states(self, posts: Sequence[Post]) -> list[torch.Tensor]:
        """Each post's token states [L_i, D] after the frozen bottom (computed for the posts not cached yet)."""
        keys = [(p.id, p.title, p.body) for p in posts]
        todo: dict[_Key, Post] = {}
        for k, p in zip(keys, posts, strict=True):
            if k not in self._states:
                todo.setdefault(k, p)
        if todo:
            self._fill(list(todo.items()))
        return [self._states[k] for k in keys]

    def _fill(self, items: list[tuple[_Key, Post]]) -> None:
        ids = [self.tokens(p) for _, p in items]
        order = sorted(range(len(items)), key=lambda i: len(ids[i]))
        for start in range(0, len(order), self.chunk_size):
            rows = order[start : start + self.chunk_size]
            width = max(len(ids[i]) for i in rows)
            arr = torch.full((len(rows), width), self.tokens.pad, dtype=torch.long)  # (b, L)
            mask = torch.zeros((len(rows), width), dtype=torch.long)  # (b, L)
            for r, i in enumerate(rows):
                arr[r, : len(ids[i])] = torch.tensor(ids[i])
                mask[r, : len(ids[i])] = 1
            arr, mask = arr.to(self.device), mask.to(self.device)
            hidden = self.embeddings(input_ids=arr)  # (b, L, D)
            hidden = _run_layers(self._bert, self.layers, hidden, mask).float()  # (b, L, D)
            for r, i in enumerate(rows):
                self._states[items[i][0]] = hidden[r, : len(ids[i])].to(self.dtype).clone()


def _copy(module: nn.Module) -> nn.Module:
    import copy

    out = copy.deepcopy(module)
    for p in out.parameters():
        p.requires_grad_(False)
    return out


class PostVectors:
    """posts -> unit vectors [N, D] of ``model``: the frozen bottom read from ``prefix`` when there is one, the
    layers above it run (with gradients when the caller wants them); without a prefix, the whole forward pass.

    Args:
        model: the model being trained or scored.
        prefix: its frozen bottom's cache (checked against the model), or None.
        chunk_size: posts per forward pass (sorted by length, so each chunk pads little).
        truncate: 0 = every wordpiece; else each post keeps its first ``truncate`` positions above the frozen
            bottom (the training steps' shorter length, :attr:`LearnSettings.train_len`). The cached states were
            computed over the whole post, so the positions kept still carry what the bottom read beyond them.
    """

    def __init__(self, model: MiniLM, prefix: FrozenPrefix | None, chunk_size: int = 16, truncate: int = 0) -> None:
        if prefix is not None:
            prefix.check(model)
        self.model, self.prefix, self.chunk_size, self.truncate = model, prefix, chunk_size, truncate
        self.tokens = prefix.tokens if prefix is not None else Tokens(model)

    def __call__(self, posts: Sequence[Post]) -> torch.Tensor:
        cut = self.truncate or None
        if self.prefix is None:
            return encode_sorted(self.model.encoder, [self.tokens(p)[:cut] for p in posts], self.tokens.pad,
                                 self.chunk_size)
        return self._top([s[:cut] for s in self.prefix.states(posts)])

    def _top(self, states: Sequence[torch.Tensor]) -> torch.Tensor:
        bert = self.model.encoder.bert
        layers = bert.encoder.layer[self.prefix.n_layers :]  # type: ignore[union-attr]
        device = next(self.model.parameters()).device
        order = sorted(range(len(states)), key=lambda i: states[i].shape[0])
        parts: list[torch.Tensor] = []
        for start in range(0, len(order), self.chunk_size):
            rows = order[start : start + self.chunk_size]
            width = max(states[i].shape[0] for i in rows)
            hidden = torch.zeros(len(rows), width, states[rows[0]].shape[1], device=device)  # (b, L, D)
            mask = torch.zeros(len(rows), width, dtype=torch.long, device=device)  # (b, L)
            for r, i in enumerate(rows):
                n = states[i].shape[0]
                hidden[r, :n] = states[i].to(device=device, dtype=torch.float32)
                mask[r, :n] = 1
            out = _run_layers(bert, layers, hidden, mask)  # (b, L, D)
            parts.append(compute_mean_pool(out, mask).float())  # (b, D)
        stacked = torch.cat(parts)  # (N, D) in sorted order
        back = torch.empty(len(order), dtype=torch.long, device=device)
        back[torch.tensor(order, device=device)] = torch.arange(len(order), device=device)
        return stacked[back]  # (N, D) in input order

