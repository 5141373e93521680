"""The shared text pipeline with per-post token caches, for training runs that tokenise each post many times."""

from __future__ import annotations

import logging

from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary

__all__ = ["CachedTextPipeline"]

logger = logging.getLogger(__name__)


class CachedTextPipeline(TextPipeline):
    """The shared pipeline with per-post token caches, so each post is tokenised once per run.

    Same methods, same results: ``build_inputs`` reads tokens through ``text_tokens``/``post_tokens``.
    """

    def __init__(self, settings: TextPipelineSettings, vocab: Vocabulary | None = None) -> None:
        super().__init__(settings, vocab)
        self._post_cache: dict[Post, tuple[list[str], list[str]]] = {}
        self._text_cache: dict[Post, list[str]] = {}

    def post_tokens(self, post: Post) -> tuple[list[str], list[str]]:
        got = self._post_cache.get(post)
        if got is None:
            got = self._post_cache[post] = super().post_tokens(post)
        return got

    def text_tokens(self, post: Post) -> list[str]:
        got = self._text_cache.get(post)
        if got is None:
            got = self._text_cache[post] = super().text_tokens(post)
        return got
