"""The query encoder's thread policy: every encoding with the session's threads, at most usable CPUs ÷ threads of
them at once per process; the title beside the body on a helper thread; no title vector where none is read."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest

from semdup.core.posts import Post
from semdup.reranker import encoding
from semdup.reranker.encoding import QueryEncoder


class CountingBundle:
    """Records how many encodings run at once and on which threads. No clock: each body's run waits until
    ``at_once`` bodies have been in at the same time (an event), so the most that may overlap always do."""

    uses_title = True

    def __init__(self, threads: int, at_once: int = 1) -> None:
        options = SimpleNamespace(intra_op_num_threads=threads)
        self.session = SimpleNamespace(get_session_options=lambda: options)
        self.lock = threading.Lock()
        self.running = self.most = 0
        self.threads: list[str] = []

        self.titles_during_body, self.at_once, self.full = 0, at_once, threading.Event()
        self.body_started, self.title_seen = threading.Event(), threading.Event()

    def _run(self, body: bool) -> None:
        with self.lock:
            if body:  # an encoding is counted by its body's run (its title's runs beside it)
                self.running += 1
                self.most = max(self.most, self.running)
                if self.running >= self.at_once:
                    self.full.set()
            self.threads.append(threading.current_thread().name)
        if body:
            self.full.wait(10.0)  # a guard against a hang, not a pace: the event comes as soon as they overlap
        with self.lock:
            if body:
                self.running -= 1

    def encode_query(self, post: Post) -> tuple[np.ndarray, None]:
        with self.lock:
            self.running += 1
        self.body_started.set()
        self.title_seen.wait(1.0)  # beside it, the title looks while the body runs; after it, never in time
        with self.lock:
            self.running -= 1
        self._run(body=True)
        return np.ones(2, dtype=np.float32), None

    def encode_titles(self, posts: list[Post]) -> list[np.ndarray]:
        self.body_started.wait(1.0)
        with self.lock:
            self.titles_during_body += self.running > 0
        self.title_seen.set()
        self._run(body=False)
        return [np.zeros(2, dtype=np.float32)]


def _encode_from(encoder: QueryEncoder, callers: int) -> None:
    def call() -> None:
        for _ in range(4):
            encoder.encode_post(Post("q", "Visa?", "How long can I stay?"))

    threads = [threading.Thread(target=call) for _ in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@pytest.mark.parametrize(("cpus", "threads", "at_once"), [(2, 2, 1), (2, 1, 2), (16, 2, 8), (1, 2, 1)])
def test_at_most_usable_cpus_over_threads_encodings_run_at_once(
    monkeypatch: pytest.MonkeyPatch, cpus: int, threads: int, at_once: int
) -> None:
    monkeypatch.setattr(encoding, "usable_cpus", lambda: cpus)
    bundle = CountingBundle(threads, at_once)
    encoder = QueryEncoder(bundle)
    assert encoder.slots == at_once
    _encode_from(encoder, callers=at_once + 3)
    assert bundle.most == at_once


def test_the_title_runs_beside_the_body_and_only_where_it_is_read() -> None:
    bundle = CountingBundle(2)
    got = QueryEncoder(bundle).encode_post(Post("q", "Visa?", "How long?"))
    assert got.title is not None and threading.current_thread().name in bundle.threads  # the body: the caller's
    assert any(t.startswith("semdup-title") for t in bundle.threads) and bundle.titles_during_body == 1
    assert QueryEncoder(bundle).encode_post(Post("q", "", "How long?")).title is None  # no title, no run
    assert QueryEncoder(bundle).encode_post(Post("q", "Visa?", ""), with_title=False).title is None
    assert len(bundle.threads) == 4


def test_a_bundle_without_a_session_counts_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(encoding, "usable_cpus", lambda: 4)
    assert QueryEncoder(SimpleNamespace(session=None)).slots == 4  # type: ignore[arg-type]
    every_core = SimpleNamespace(intra_op_num_threads=0)  # 0: onnxruntime's default, every core
    zero = SimpleNamespace(session=SimpleNamespace(get_session_options=lambda: every_core))
    assert QueryEncoder(zero).slots == 1  # type: ignore[arg-type]
