"""semdup's torch vectors of each base encoder equal sentence-transformers' ``encode`` on real posts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings
from semdup.core.wordpiece import pad_id, wordpiece_inputs, wordpiece_text
from semdup.export.parity import sample_posts
from semdup.training.base_encoders import base_encoder_names
from semdup.training.models.minilm import MiniLM


def test_pad_id_prefers_the_tokenizers_own_pad_token() -> None:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    mpnet_like = Tokenizer(WordLevel({"<s>": 0, "<pad>": 1, "</s>": 2, "[UNK]": 3, "[PAD]": 4}, unk_token="[UNK]"))
    bert_like = Tokenizer(WordLevel({"[PAD]": 0, "[UNK]": 1}, unk_token="[UNK]"))
    neither = Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    assert (pad_id(mpnet_like), pad_id(bert_like), pad_id(neither)) == (1, 0, 0)


@pytest.fixture(scope="module")
def posts() -> list[Post]:
    return sample_posts(20)


@pytest.mark.slow
@pytest.mark.parametrize("name", base_encoder_names())
def test_torch_vectors_and_ids_equal_sentence_transformers(name: str, posts: list[Post]) -> None:
    """20 AskUbuntu posts (HTML, code, long bodies cut at max_len), one padded batch: within 1e-5."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    torch.set_num_threads(2)
    model = MiniLM.from_hparams({"base_encoder": name}, TextPipeline(TextPipelineSettings()))
    texts = [wordpiece_text(p, TextPipelineSettings()) for p in posts]
    st = SentenceTransformer(str(model.model_dir), device="cpu")
    assert st.max_seq_length == model.hparams["max_len"]
    hf = AutoTokenizer.from_pretrained(str(model.model_dir), local_files_only=True)
    ref_ids = hf(texts, padding=True, truncation=True, max_length=st.max_seq_length, return_tensors="np")
    ours = wordpiece_inputs(model.tokenizer, posts)
    np.testing.assert_array_equal(ours["input_ids"], ref_ids["input_ids"])  # specials and padding included
    np.testing.assert_array_equal(ours["attention_mask"], ref_ids["attention_mask"])
    assert ours["input_ids"].shape[1] == model.hparams["max_len"]  # some post is long enough to be cut
    ref = st.encode(texts, convert_to_numpy=True, batch_size=len(texts))
    np.testing.assert_allclose(model.embed(posts, batch_size=len(posts)).numpy(), ref, atol=1e-5)
