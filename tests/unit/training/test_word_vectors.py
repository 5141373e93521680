"""Word vectors for the CNN embeddings: GloVe from the installed package, word2vec on real text, the init matrix."""

from __future__ import annotations

import json

import numpy as np
import pytest

from semdup.core.errors import DataError
from semdup.core.text_pipeline import PAD_ID, UNK_ID, TextPipeline, TextPipelineSettings, Vocabulary
from semdup.training.word_vectors import (
    Word2VecSettings,
    WordVectors,
    compute_embedding_matrix,
    corpus_texts,
    embedding_matrix,
    load_glove,
    load_word2vec,
    load_word_vectors,
    train_word2vec,
)


@pytest.fixture(scope="module")
def glove() -> WordVectors:
    return load_glove()


def test_glove_loads_offline_with_known_vector(glove: WordVectors) -> None:
    assert glove.vectors.shape == (400_000, 50)
    assert glove.vectors.dtype == np.float32
    assert glove.words[:3] == ["the", ",", "."]
    # GloVe 6B 50-d's published first components of "the".
    np.testing.assert_allclose(glove.vectors[0, :3], [0.418, 0.24968, -0.41242], rtol=1e-5)


def test_embedding_matrix_copies_known_words_and_zeroes_padding(glove: WordVectors) -> None:
    pipe = TextPipeline(TextPipelineSettings())
    vocab = Vocabulary.build([pipe.tokens("How do I mount a USB drive"), pipe.tokens("qwxzzyq mount")])
    matrix = embedding_matrix(vocab, glove, seed=3)
    assert matrix.shape == (len(vocab), 50)
    assert not matrix[PAD_ID].any()
    index = glove.index()
    np.testing.assert_array_equal(matrix[vocab.stoi["mount"]], glove.vectors[index["mount"]])
    oov = matrix[vocab.stoi["qwxzzyq"]]
    scale = float(glove.vectors.std())
    assert oov.any() and np.all(np.abs(oov) <= scale)
    assert matrix[UNK_ID].any()
    np.testing.assert_array_equal(matrix, embedding_matrix(vocab, glove, seed=3))


def test_compute_embedding_matrix_counts_hits() -> None:
    wv = WordVectors(["a", "b"], np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32), "toy")
    matrix, hits = compute_embedding_matrix(["<pad>", "<unk>", "b", "zz"], wv, seed=0, oov_scale=0.1)
    assert hits == 1
    np.testing.assert_array_equal(matrix[2], [3.0, 4.0])
    assert np.all(np.abs(matrix[3]) <= 0.1)
    assert not matrix[0].any()


def test_unknown_source_lists_accepted_values() -> None:
    with pytest.raises(ValueError, match="glove, word2vec"):
        load_word_vectors("fasttext")


def test_missing_word2vec_files_say_how_to_fix(tmp_path) -> None:
    with pytest.raises(DataError, match="train_word2vec"):
        load_word2vec(tmp_path / "nothing")


def _tiny_data_dir(tmp_path):
    ask = tmp_path / "askubuntu-pairs"
    ask.mkdir(parents=True)
    rows = []
    for i in range(30):
        q = {"id": f"q{i}", "title": "How do I mount a usb drive", "body": "<p>The usb drive does not mount</p>"}
        c = {"id": f"c{i}", "title": "Mount an external disk", "body": "Ubuntu cannot mount my disk drive"}
        rows.append(json.dumps({"query": q, "candidate": c, "label": "duplicate"}))
    (ask / "train.pairs.jsonl").write_text("\n".join(rows), encoding="utf-8")
    return tmp_path


def test_corpus_texts_reads_each_post_field_once(tmp_path) -> None:
    texts = list(corpus_texts(_tiny_data_dir(tmp_path)))
    assert len(texts) == 120  # 30 queries + 30 candidates, title and body each
    assert {s for s, _ in texts} == {"askubuntu"}


def test_word2vec_trains_on_pipeline_tokens_and_round_trips(tmp_path) -> None:
    data = _tiny_data_dir(tmp_path / "data")
    out = tmp_path / "w2v" / "vectors"
    wv = train_word2vec(out, data, Word2VecSettings(dim=8, epochs=2, min_count=1))
    assert "usb" in wv.words and "mount" in wv.words and "<p>" not in wv.words
    back = load_word2vec(out)
    assert back.words == wv.words
    np.testing.assert_array_equal(back.vectors, wv.vectors)
    vocab = Vocabulary.build([["usb", "mount", "zebra"]])
    assert embedding_matrix(vocab, back).shape == (5, 8)


def test_malformed_pairs_file_is_a_clear_error(tmp_path) -> None:
    ask = tmp_path / "askubuntu-pairs"
    ask.mkdir()
    (ask / "train.pairs.jsonl").write_text("{not json\n", encoding="utf-8")
    with pytest.raises(DataError, match="not JSON"):
        list(corpus_texts(tmp_path))
