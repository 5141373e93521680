"""Running the encoder session over many batches: several in flight, results written where they belong.

:class:`EncoderRunner` holds a bundle's one onnxruntime session (one per worker process) and runs it on input
batches:

* ``streams`` batches at once. ``InferenceSession.run`` is thread-safe and releases the GIL, so on CPU a session
  with one intra-op thread run from two threads keeps two cores busy without the pool's per-operator wake-ups
  (with the length-sorted pools of :meth:`~semdup.bundle.bundle.Bundle.encode_prepared`, a worker's CPU per post
  fell by 16 % beside neural search: ``docs/benchmarks.md``, issue #28), and on a GPU the next batch is padded and
  copied while the previous one runs.
* IO binding (``io_binding=True``, the default on CUDA): each batch's vectors are copied from the device straight
  into the caller's rows of the result matrix, instead of into a new array that is then copied again.

The batches' results are the same either way: a batch runs the same kernels whatever thread runs it, and the
output binding only changes where the result is copied to (tested bit-equal on CPU).

Example::

    runner = EncoderRunner(session, ("input_ids", "attention_mask"), dimension=384, streams=2)
    out = np.empty((n, 384), np.float32)
    runner.run_into((feed, out[a:b]) for feed, (a, b) in batches)
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

__all__ = ["EncoderRunner", "CUDA_STREAMS"]

# Batches in flight on one GPU: two let the host pad and copy one while the device runs the other; more only add
# activations in memory (a GPU batch is up to GPU_BATCH_TOKENS tokens).
CUDA_STREAMS = 2


class EncoderRunner:
    """Runs one onnxruntime session on input batches, ``streams`` at a time.

    Args:
        session: the encoder's ``onnxruntime.InferenceSession``.
        input_names: the graph's input names, in order.
        output_name: the vector output (``vector``).
        device: ``cpu`` or ``cuda``: where the session's first provider runs.
        streams: batches run at once (>= 1; at most :data:`CUDA_STREAMS` on CUDA).
        io_binding: copy outputs into the caller's rows through onnxruntime's IO binding (default: on CUDA).
    """

    def __init__(self, session: Any, input_names: Sequence[str], output_name: str = "vector", *,
                 device: str = "cpu", streams: int = 1, io_binding: bool | None = None) -> None:
        if streams < 1:
            raise ValueError(f"streams must be at least 1, got {streams}")
        self.session = session
        self.input_names = tuple(input_names)
        self.output_name = output_name
        self.device = device
        self.streams = min(int(streams), CUDA_STREAMS) if device == "cuda" else int(streams)
        self.io_binding = device == "cuda" if io_binding is None else bool(io_binding)
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def run(self, feed: Mapping[str, np.ndarray]) -> np.ndarray:
        """The raw output [B, D] float32 of one batch (``session.run``)."""
        inputs = {n: feed[n] for n in self.input_names}
        return np.asarray(self.session.run([self.output_name], inputs)[0], dtype=np.float32)

    def _run_into(self, feed: Mapping[str, np.ndarray], out: np.ndarray) -> None:
        if not self.io_binding:
            out[...] = self.run(feed)
            return
        binding = self.session.io_binding()
        for name in self.input_names:
            binding.bind_cpu_input(name, np.ascontiguousarray(feed[name]))
        binding.bind_output(self.output_name, "cpu", 0, np.float32, list(out.shape), out.ctypes.data)
        self.session.run_with_iobinding(binding)
        binding.synchronize_outputs()

    def _executor(self) -> ThreadPoolExecutor:
        """The stream threads, started on first use (in the worker process, after fork)."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.streams, thread_name_prefix="semdup-encode")
            return self._pool

    def run_into(self, jobs: Iterable[tuple[Mapping[str, np.ndarray], np.ndarray]]) -> None:
        """Run each ``(feed, out)``, writing the batch's output into ``out`` (a C-contiguous float32 view of the
        caller's result, [B, D]). Up to ``streams`` batches run at once; ``jobs`` is read lazily, so the next
        batch is built while earlier ones run. The first error is raised once the batches in flight are done."""
        if self.streams == 1:
            for feed, out in jobs:
                self._run_into(feed, self._contiguous(out))
            return
        pool = self._executor()
        in_flight: deque[Future[None]] = deque()
        try:
            for feed, out in jobs:
                if len(in_flight) >= self.streams:
                    in_flight.popleft().result()
                in_flight.append(pool.submit(self._run_into, feed, self._contiguous(out)))
            while in_flight:
                in_flight.popleft().result()
        finally:
            for fut in in_flight:  # an error above: let what is running finish before the caller reads `out`
                fut.exception()

    @staticmethod
    def _contiguous(out: np.ndarray) -> np.ndarray:
        if out.dtype != np.float32 or not out.flags.c_contiguous:
            raise ValueError("run_into writes into C-contiguous float32 rows; pass a slice of rows of such an array")
        return out

    def close(self) -> None:
        """Stop the stream threads (a later run starts them again)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
