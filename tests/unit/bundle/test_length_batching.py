"""Length batching and the encoder runner: every sequence encoded once, the vectors back in input order and equal
to one-by-one encoding, whatever the batch size, the number of streams or the IO binding."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from tiny_onnx import WORDS, tiny_wordpiece_bundle

from semdup.bundle.batching import length_batches, pad_rows
from semdup.bundle.bundle import Bundle
from semdup.bundle.runner import CUDA_STREAMS, EncoderRunner
from semdup.core.posts import Post


def _posts(n: int, seed: int = 0) -> list[Post]:
    """Posts of 0 to 45 words (some cut at the tokenizer's 32), some without a title, lengths in no order."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        title = " ".join(rng.choice(WORDS, size=int(rng.integers(0, 6))))
        body = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 45))))
        out.append(Post(str(i), title, body))
    return out


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_wordpiece_bundle(tmp_path_factory.mktemp("batching") / "tiny")


def test_length_batches_sort_longest_first_and_cover_every_row_once() -> None:
    lengths = [5, 12, 3, 12, 7, 1, 9]
    batches = length_batches(lengths, max_rows=3)
    assert [b.tolist() for b in batches] == [[1, 3, 6], [4, 0, 2], [5]]  # ties keep input order
    tokens = length_batches(lengths, max_rows=3, max_tokens=24)
    assert [b.tolist() for b in tokens] == [[1, 3], [6, 4], [0, 2, 5]]
    for rows in tokens:
        assert len(rows) * max(lengths[r] for r in rows) <= 24
    assert sorted(np.concatenate(tokens).tolist()) == list(range(len(lengths)))
    assert [b.tolist() for b in length_batches([40, 2], max_rows=8, max_tokens=10)] == [[0], [1]]
    with pytest.raises(ValueError):
        length_batches(lengths, max_rows=0)


def test_pad_rows_pads_to_the_longest_of_the_batch() -> None:
    ids, mask = pad_rows([[2, 5, 3], [2, 3], [2, 7, 8, 9, 3]], np.array([0, 1]), pad_id=0)
    assert ids.tolist() == [[2, 5, 3], [2, 3, 0]] and mask.tolist() == [[1, 1, 1], [1, 1, 0]]


class SlowSession:
    """A thread-safe stand-in: output row = [Σ ids, length] over the masked positions; records concurrency."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.most = 0

    def run(self, outputs: list[str], feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        with self.lock:
            self.active += 1
            self.most = max(self.most, self.active)
        threading.Event().wait(0.01)
        ids, mask = feed["input_ids"], feed["attention_mask"]
        out = np.stack([(ids * mask).sum(1), mask.sum(1)], axis=1).astype(np.float32)
        with self.lock:
            self.active -= 1
        return [out]


def test_the_runner_keeps_up_to_streams_batches_in_flight_and_writes_each_in_its_place() -> None:
    session = SlowSession()
    runner = EncoderRunner(session, ("input_ids", "attention_mask"), streams=3)
    seqs = [[2] + [i + 4] * (i % 7) + [3] for i in range(40)]
    out = np.zeros((len(seqs), 2), dtype=np.float32)
    batches = length_batches([len(s) for s in seqs], max_rows=4)
    jobs, at = [], 0
    for rows in batches:
        ids, mask = pad_rows(seqs, rows, 0)
        jobs.append(({"input_ids": ids, "attention_mask": mask}, out[at : at + len(rows)]))
        at += len(rows)
    runner.run_into(iter(jobs))
    in_order = np.empty_like(out)
    in_order[np.concatenate(batches)] = out
    assert in_order.tolist() == [[float(sum(s)), float(len(s))] for s in seqs]  # integer sums: exact
    assert session.most == 3
    runner.close()


def test_cuda_caps_the_streams() -> None:
    assert EncoderRunner(SlowSession(), ("input_ids",), device="cuda", streams=16).streams == CUDA_STREAMS
    assert EncoderRunner(SlowSession(), ("input_ids",), device="cpu", streams=16).streams == 16


def test_io_binding_writes_the_same_bits_as_a_plain_run(bundle_dir: Path) -> None:
    bundle = Bundle.load(bundle_dir)
    feed = {
        "input_ids": np.array([[2, 9, 14, 3], [2, 5, 3, 0]]),
        "attention_mask": np.array([[1, 1, 1, 1], [1, 1, 1, 0]]),
    }
    plain = EncoderRunner(bundle.session, ("input_ids", "attention_mask"), io_binding=False).run(feed)
    bound = EncoderRunner(bundle.session, ("input_ids", "attention_mask"), io_binding=True)
    out = np.full((4, plain.shape[1]), np.nan, dtype=np.float32)
    bound.run_into([(feed, out[1:3])])
    # bit-equal: one session, one feed, the same kernels; only where the output lands differs
    assert np.array_equal(out[1:3], plain) and np.isnan(out[0]).all() and np.isnan(out[3]).all()
    with pytest.raises(ValueError, match="C-contiguous float32"):
        bound.run_into([(feed, out[1:3, :4])])


@pytest.mark.parametrize("streams,batch,io_binding", [(1, None, False), (2, 3, False), (3, 64, True)])
def test_document_fields_equal_one_by_one_encoding(
    bundle_dir: Path, streams: int, batch: int | None, io_binding: bool
) -> None:
    """Texts and titles in one length-sorted pool give each post the vectors it gets alone, and the same terms."""
    posts = _posts(37)
    ref = Bundle.load(bundle_dir)
    alone = [ref.document_fields([p])[0] for p in posts]
    bundle = Bundle.load(bundle_dir, streams=streams)
    bundle.runner.io_binding = io_binding
    got = bundle.document_fields(posts, batch_size=batch)
    for p, a, b in zip(posts, alone, got, strict=True):
        assert b["terms"] == a["terms"] and b["term_ids"] == a["term_ids"] and b["model"] == a["model"]
        np.testing.assert_allclose(b["vector"], a["vector"], rtol=0, atol=1e-6)
        assert (a["title_vector"] is None) == (b["title_vector"] is None)
        if a["title_vector"] is not None:
            np.testing.assert_allclose(b["title_vector"], a["title_vector"], rtol=0, atol=1e-6)
            np.testing.assert_allclose(a["title_vector"], ref.encode_titles([p])[0], rtol=0, atol=1e-6)
    assert sum(f["title_vector"] is None for f in got) > 0  # some posts have no title


def test_prepared_arrays_are_the_lists_as_float32(bundle_dir: Path) -> None:
    bundle = Bundle.load(bundle_dir, streams=2)
    posts = _posts(9, seed=3)
    lists = bundle.document_fields(posts)
    arrays = bundle.encode_prepared(bundle.prepare_documents(posts), arrays=True)
    for a, b in zip(lists, arrays, strict=True):
        assert isinstance(b["vector"], np.ndarray) and b["vector"].dtype == np.float32
        assert np.array_equal(np.asarray(a["vector"], dtype=np.float32), b["vector"])
