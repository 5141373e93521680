"""Framework tests: input kinds (training = serving ids), scoring contract, registry, checkpoints, data builders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from semdup.core.errors import BundleError, ConfigError
from semdup.core.inputs import MIN_LENGTH, build_inputs, input_names
from semdup.core.lexical_scores import LexicalIndex
from semdup.core.posts import Post
from semdup.core.scoring import PostScorer, bow_matrix, fused_scores, minmax_normalise
from semdup.core.text_pipeline import PAD_ID, TextPipeline, TextPipelineSettings, Vocabulary
from semdup.training.checkpoint import CheckpointScorer, load_checkpoint, save_checkpoint
from semdup.training.pairs import pair_training_data, semeval_training_data, split_held_out
from semdup.training.registry import get_arch
from semdup.training.trainer import CachedTextPipeline

DATA = Path("/work/shared/data")
POSTS = [
    Post("1", "How to mount a USB drive?", "<p>I have a <b>usb</b> stick, see http://x.org/a</p>"),
    Post("2", "mount usb drive ubuntu", ""),
    Post("3", "", "best visa for india travel"),
    Post("4", "Visa for India", "Which visa do I need to travel to India?"),
]


@pytest.fixture()
def pipeline() -> TextPipeline:
    base = TextPipeline(TextPipelineSettings(trigram_buckets=1000, max_tokens=40))
    vocab = Vocabulary.build(base.text_tokens(p) for p in POSTS)
    return TextPipeline(base.settings, vocab)


def test_text_ids_equal_direct_pipeline_calls(pipeline: TextPipeline) -> None:
    arrays = build_inputs("text_ids", pipeline, POSTS, with_bow=True)
    ids = arrays["ids"]
    assert ids.dtype == np.int64
    assert ids.shape[1] == max(len(pipeline.text_tokens(p)) for p in POSTS)
    for row, post in zip(ids, POSTS, strict=True):
        direct = pipeline.ids(pipeline.text_tokens(post))
        assert row[: len(direct)].tolist() == direct
        assert (row[len(direct) :] == PAD_ID).all()
    np.testing.assert_array_equal(arrays["bow_ids"], ids)


def test_training_pipeline_cache_gives_the_serving_ids(pipeline: TextPipeline) -> None:
    cached = CachedTextPipeline(pipeline.settings, pipeline.vocab)
    for kind in ("text_ids", "title_body_ids", "trigram_ids"):
        a = build_inputs(kind, pipeline, POSTS)
        b = build_inputs(kind, cached, POSTS)
        b2 = build_inputs(kind, cached, POSTS)  # second call reads the cache
        assert set(a) == set(input_names(kind))
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])
            np.testing.assert_array_equal(a[name], b2[name])


def test_short_posts_are_padded_to_the_convolution_width(pipeline: TextPipeline) -> None:
    arrays = build_inputs("title_body_ids", pipeline, [Post("x", "usb", "")])
    assert arrays["title_ids"].shape == (1, MIN_LENGTH)
    assert arrays["body_ids"].tolist() == [[PAD_ID] * MIN_LENGTH]


def test_trigram_ids_match_pipeline(pipeline: TextPipeline) -> None:
    arr = build_inputs("trigram_ids", pipeline, POSTS[:1])["trigram_ids"]
    grams = pipeline.trigram_ids(pipeline.text_tokens(POSTS[0]))
    assert arr.shape[2] == pipeline.settings.max_trigrams_per_word
    assert arr[0, 0, : len(grams[0])].tolist() == list(grams[0])


def test_unknown_input_kind_and_arch_are_refused(pipeline: TextPipeline) -> None:
    with pytest.raises(ConfigError, match="known kinds"):
        build_inputs("chars", pipeline, POSTS)
    with pytest.raises(ConfigError, match="known"):
        get_arch("transformer-xl")


def test_fused_scores_and_minmax() -> None:
    s = fused_scores(
        np.array([0.5, 0.0]),
        np.array([1.0, 0.2]),
        np.array([1.0, 0.0]),
        {"beta_bow": 2.0, "beta_dense": 1.0, "alpha": 0.5},
    )
    np.testing.assert_allclose(s, [2.5, 0.2])
    np.testing.assert_allclose(minmax_normalise([3.0, 1.0, 2.0]), [1.0, 0.0, 0.5])
    np.testing.assert_allclose(minmax_normalise([2.0, 2.0]), [0.0, 0.0])
    with pytest.raises(ValueError, match="accepted"):
        fused_scores(None, np.ones(1), None, {"gamma": 1.0})


def test_numpy_bow_cosine_equals_torch_bow_cosine(pipeline: TextPipeline) -> None:
    model = get_arch("bow-cnn").model_class.from_hparams({"word_vectors": "none", "conv_units": 8}, pipeline)
    with torch.no_grad():
        model.term_weight.uniform_(0.5, 2.0)
    q = {k: torch.from_numpy(v) for k, v in build_inputs("text_ids", pipeline, [POSTS[0]] * 3, True).items()}
    c = {k: torch.from_numpy(v) for k, v in build_inputs("text_ids", pipeline, POSTS[1:], True).items()}
    from semdup.training.models._base import bow_cosine

    torch_cos = bow_cosine(model.encode(q), model.encode(c)).detach().numpy()
    m = bow_matrix(pipeline, POSTS, model.term_weights())
    np_cos = np.asarray((m[1:] @ m[0].T).todense()).ravel()
    np.testing.assert_allclose(torch_cos, np_cos, atol=1e-5)
    assert np_cos[0] > np_cos[1]  # the other usb post shares words, the visa post none


@pytest.mark.parametrize("arch", ["bow-cnn", "cnn"])
def test_checkpoint_round_trip_and_scorer_match_the_torch_model(
    arch: str, pipeline: TextPipeline, tmp_path: Path
) -> None:
    model = get_arch(arch).model_class.from_hparams({"word_vectors": "none", "conv_units": 16, "emb_dim": 8}, pipeline)
    model.eval()
    save_checkpoint(tmp_path, model, arch, pipeline, {"threshold": 0.25})
    loaded, pipe2, config = load_checkpoint(tmp_path)
    assert config["arch"] == arch and config["threshold"] == 0.25 and config["vocab_size"] == len(pipeline.vocab)
    assert pipe2.settings == pipeline.settings and pipe2.vocab.itos == pipeline.vocab.itos
    for a, b in zip(model.state_dict().values(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    scorer = CheckpointScorer.from_dir(tmp_path)
    assert isinstance(scorer, PostScorer) and scorer.threshold == 0.25
    q = {k: torch.from_numpy(v) for k, v in build_inputs("text_ids", pipeline, [POSTS[0]] * 3, True).items()}
    c = {k: torch.from_numpy(v) for k, v in build_inputs("text_ids", pipeline, POSTS[1:], True).items()}
    with torch.no_grad():
        expected = model.score(q, c).numpy()
    np.testing.assert_allclose(scorer.score(POSTS[0], POSTS[1:]), expected, atol=1e-5)
    np.testing.assert_allclose(scorer.score_matrix(POSTS[:1], POSTS[1:])[0], expected, atol=1e-5)


def test_checkpoint_with_mismatched_vocabulary_is_refused(pipeline: TextPipeline, tmp_path: Path) -> None:
    model = get_arch("cnn").model_class.from_hparams({"word_vectors": "none", "conv_units": 4, "emb_dim": 4}, pipeline)
    save_checkpoint(tmp_path, model, "cnn", pipeline)
    Vocabulary(pipeline.vocab.itos[:-1], pipeline.vocab.df[:-1], pipeline.vocab.n_docs).save(tmp_path / "vocab.json")
    with pytest.raises(BundleError, match="vocab_size"):
        load_checkpoint(tmp_path)
    with pytest.raises(BundleError, match="not a semdup checkpoint"):
        load_checkpoint(tmp_path / "missing")


def test_semeval_training_groups_use_irrelevant_related_as_hard_negatives() -> None:
    from semdup.data import load_semeval_xml

    part2 = load_semeval_xml(DATA / "semeval2016-task3/official/SemEval2016-Task3-CQA-QL-train-part2.xml")
    data = semeval_training_data([part2], negatives=20, seed=1)
    again = semeval_training_data([part2], negatives=20, seed=1)
    assert [g.negatives for g in data.groups] == [g.negatives for g in again.groups]
    q = part2.questions[0]
    irrelevant = {r.post.id for r in q.related if r.relevant is False}
    first = next(g for g in data.groups if g.query.id == q.post.id)
    negs = {p.id for p in first.negatives}
    assert irrelevant <= negs and len(first.negatives) == 20
    assert first.positive.id not in negs
    assert sum(p.label for p in data.pairs) == sum(r.relevant for q in part2.questions for r in q.related)


def test_pair_training_data_and_held_out_split() -> None:
    from semdup.data import load_pairs_jsonl

    pairs = load_pairs_jsonl(DATA / "askubuntu-pairs/train.pairs.jsonl")
    fit, held = split_held_out(pairs, key=lambda p: p.query.id, share=0.2)
    assert len(fit) + len(held) == len(pairs) and 0.1 < len(held) / len(pairs) < 0.3
    data = pair_training_data(fit, negatives=5)
    assert len(data.groups) == sum(p.duplicate for p in fit)
    assert all(g.positive.id not in {n.id for n in g.negatives} for g in data.groups)


def test_lexical_index(pipeline: TextPipeline) -> None:
    for kind in ("tfidf", "bm25"):
        index = LexicalIndex.build(pipeline, POSTS, kind=kind)
        assert index.top_k(pipeline, [POSTS[3]], 1) == [["3"]]
