"""The GPU worker's encoding path beside a torch reference encoder, in one run (a benchmark, not a test).

    python -m benchmarks.gpu_check --bundle B --device cuda [--posts 50000] [--workers 8]
    python -m benchmarks.gpu_check --bundle B --device cpu --posts 500 --workers 1   # dry run

``scripts/gpu/check.sh`` runs it on a GPU machine (issue #27). Two contenders encode the same ``--posts`` Travel
posts (the corpus cycled when it holds fewer, each copy with its own id; the output says how many times):

* **worker**: what a Celery worker process does with a task, all of :func:`semdup.indexer.batch_writer.index_batch`
  (parse, the post rules, the lexical document, the bundle's text ids, wordpieces, encoder, title vectors, term
  weights, packing, the bulk lines serialised) but the bulk request: the client is a null sink that answers every
  document as written. ``--workers`` processes (``semdup worker -c N``), each with the bundle loaded as a worker
  loads it (:func:`semdup.apps.worker.load_worker_bundle`: the device, the fp16 variant where it verifies,
  ``--threads`` encoder streams), take tasks of ``--task-posts`` posts (``semdup index-posts --batch-size``, at
  most 1,000) from one queue.
* **reference**: the same MiniLM in torch (the bundle's base encoder; bf16 on CUDA, fp32 on CPU): the posts'
  texts cleaned as semdup cleans them (title + body), tokenised by the Rust tokenizer's ``encode_batch`` (all
  cores), sorted by length, batches of ``--ref-batch`` (1,024), mean pooling, L2 norm, vectors back on the host.
  It encodes each post once; the worker also encodes each title for the title term and writes the documents.

It prints posts/s of both, their ratio (worker ÷ reference; the target on a GPU is ≥ 0.8), the timed phases'
wall seconds, and the cosine of the two encoders' vectors of 32 posts. Model loading and a warm-up task per
process are not timed. The load average is printed: only ratios within one run mean anything.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.indexing import _hardware, _versions
from semdup.core.posts import Post

__all__ = ["NullSink", "cycled_posts", "task_slices", "main"]

_INDEX = "gpu-check"


class _Serializer:
    """What opensearch-py's bulk helpers read from ``client.transport``: text passes through (semdup's bulk lines
    are text already)."""

    mimetype = "application/json"

    def dumps(self, data: Any) -> str:
        return data if isinstance(data, str) else json.dumps(data)


class NullSink:
    """An OpenSearch client whose bulk requests write nothing and answer every document as created: the worker's
    whole path but the request itself."""

    def __init__(self) -> None:
        self.transport = type("Transport", (), {"serializer": _Serializer()})()
        self.documents = 0

    def bulk(self, body: str | bytes | Sequence[str], **_: Any) -> dict[str, Any]:
        if isinstance(body, bytes):
            body = body.decode("utf-8")
        lines = body.splitlines() if isinstance(body, str) else body
        heads = [line for line in lines if line.startswith('{"index"')]
        self.documents += len(heads)
        return {"errors": False, "items": [{"index": {"status": 201, "_id": "-"}} for _ in heads]}


def cycled_posts(corpus: Sequence[Post], n: int) -> tuple[list[Post], int]:
    """``n`` posts: the corpus in order, again and again, each copy's ids suffixed ``~k``; and how many times the
    corpus was begun (1: no copy)."""
    if not corpus:
        raise ValueError("the corpus is empty")
    out = []
    for i in range(n):
        k, p = divmod(i, len(corpus))
        post = corpus[p]
        out.append(post if k == 0 else Post(f"{post.id}~{k}", post.title, post.body))
    return out, -(-n // len(corpus))


def task_slices(n: int, size: int) -> list[tuple[int, int]]:
    """``(start, end)`` of consecutive tasks of ``size`` posts over ``n`` posts."""
    if size < 1:
        raise ValueError(f"a task holds at least one post, got {size}")
    return [(i, min(n, i + size)) for i in range(0, n, size)]


# --- the worker path, in child processes as Celery's prefork pool runs it ---------------------------------------
_child: dict[str, Any] = {}


def _child_init(bundle_path: str, device: str, threads: int, fp16: bool | None, payloads: list[dict[str, Any]],
                barrier: Any) -> None:
    from semdup.apps.settings import load_settings
    from semdup.apps.worker import load_worker_bundle

    try:
        settings = load_settings(overrides={"worker.device": device, "worker.encode_threads": threads,
                                            "worker.fp16": fp16})
        bundle = load_worker_bundle(settings, bundle_path)
    except Exception as exc:
        sys.stderr.write(f"worker process {os.getpid()}: {type(exc).__name__}: {exc}\n")
        sys.stderr.flush()
        barrier.abort()  # the parent stops at once instead of waiting for a pool that keeps failing to start
        raise
    _child.update(bundle=bundle, payloads=payloads)
    barrier.wait()


def _child_task(span: tuple[int, int]) -> tuple[int, int, float, str]:
    """index_batch of one task into the null sink: (written, failed, CPU seconds, device and precision)."""
    from semdup.index_format.schema import CandidateFields
    from semdup.indexer.batch_writer import index_batch

    bundle, payloads = _child["bundle"], _child["payloads"]
    c0 = time.process_time()
    result = index_batch(NullSink(), _INDEX, payloads[span[0] : span[1]], bundle,  # type: ignore[arg-type]
                         search=CandidateFields(sparse=False, knn=True))
    return result.written, len(result.failed), time.process_time() - c0, f"{bundle.device} {bundle.precision}"


def _worker_path(args: argparse.Namespace, payloads: list[dict[str, Any]]) -> dict[str, Any]:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(args.workers + 1)
    pool = ctx.Pool(args.workers, _child_init,
                    (str(args.bundle), args.device, args.threads, args.fp16, payloads, barrier))
    try:
        t0 = time.perf_counter()
        try:
            barrier.wait(timeout=600)  # every process has loaded (and verified) its bundle
        except threading.BrokenBarrierError:
            raise SystemExit("a worker process could not load the bundle (its error is above)") from None
        load_s = time.perf_counter() - t0
        warm = pool.map(_child_task, [(0, min(len(payloads), 64))] * args.workers, chunksize=1)
        spans = task_slices(len(payloads), args.task_posts)
        t0 = time.perf_counter()
        done = pool.map(_child_task, spans, chunksize=1)
        wall = time.perf_counter() - t0
    except BaseException:
        pool.terminate()
        raise
    pool.close()
    pool.join()
    written, failed = sum(d[0] for d in done), sum(d[1] for d in done)
    return {"posts": len(payloads), "written": written, "failed": failed, "wall_s": wall,
            "posts_per_s": len(payloads) / wall, "cpu_s": sum(d[2] for d in done), "tasks": len(spans),
            "load_s": load_s, "runs_on": sorted({d[3] for d in warm + done})}


# --- the torch reference --------------------------------------------------------------------------------------
def _reference(args: argparse.Namespace, posts: list[Post], bundle: Any) -> tuple[dict[str, Any], np.ndarray]:
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModel

    from semdup.bundle.batching import pad_rows
    from semdup.core.wordpiece import pad_id, wordpiece_text
    from semdup.training.base_encoders import base_encoder_dir

    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = AutoModel.from_pretrained(str(base_encoder_dir(bundle.manifest["base_encoder"]["name"])))
    model = model.to(device=device, dtype=dtype).eval()
    tok = Tokenizer.from_str(bundle.pipeline.wordpiece_tokenizer.to_str())
    tok.no_padding()
    tok.enable_truncation(max_length=int(bundle.manifest["tokenizer"]["max_len"]))
    settings = bundle.pipeline.settings
    pad = pad_id(tok)

    def encode(batch_posts: list[Post]) -> np.ndarray:
        texts = [wordpiece_text(p, settings) for p in batch_posts]
        ids = [e.ids for e in tok.encode_batch(texts)]
        order = np.argsort([-len(s) for s in ids], kind="stable")
        out = []
        with torch.inference_mode():
            for i in range(0, len(order), args.ref_batch):
                ids_np, mask_np = pad_rows(ids, order[i : i + args.ref_batch], pad)
                x, mask = torch.from_numpy(ids_np), torch.from_numpy(mask_np)
                if device.type == "cuda":
                    x = x.pin_memory().to(device, non_blocking=True)
                    mask = mask.pin_memory().to(device, non_blocking=True)
                hidden = model(input_ids=x, attention_mask=mask).last_hidden_state
                m = mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1)
                out.append(torch.nn.functional.normalize(pooled.float(), dim=1))
            vectors = torch.cat(out).cpu().numpy()
        back = np.empty_like(vectors)
        back[order] = vectors
        return back

    encode(posts[:256])  # warm-up: kernels, allocator
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    vectors = encode(posts)
    if device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    return ({"posts": len(posts), "wall_s": wall, "posts_per_s": len(posts) / wall, "dtype": str(dtype),
             "device": name, "batch": args.ref_batch}, vectors)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True, type=Path, help="a MiniLM bundle (base encoder or the default)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--posts", type=int, default=50_000)
    ap.add_argument("--workers", type=int, default=None, help="worker processes (default: half the cores, at most 8)")
    ap.add_argument("--threads", type=int, default=None, help="encoder streams per process (default: the worker's: "
                    "cores / workers on CPU, capped at 2 on CUDA)")
    ap.add_argument("--task-posts", type=int, default=1000, help="posts per task (index-posts --batch-size)")
    ap.add_argument("--ref-batch", type=int, default=1024, help="the reference's batch (sorted by length)")
    ap.add_argument("--fp16", choices=("auto", "true", "false"), default="auto")
    ap.add_argument("--json-out", type=Path, default=None, help="also write the report here")
    args = ap.parse_args(argv)
    cores = os.cpu_count() or 1
    args.workers = args.workers or max(1, min(8, cores // 2))
    args.threads = args.threads or max(1, cores // args.workers)
    args.fp16 = {"auto": None, "true": True, "false": False}[args.fp16]
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    from semdup.bundle.bundle import Bundle
    from semdup.data.paths import travel_dir
    from semdup.data.stackexchange import load_stackexchange_dump

    load0 = os.getloadavg()[0]
    corpus = load_stackexchange_dump(travel_dir()).corpus()
    posts, cycles = cycled_posts(corpus, args.posts)
    payloads = [p.to_json() for p in posts]
    worker = _worker_path(args, payloads)
    probe = Bundle.load(args.bundle, device="cpu", intra_op_threads=1)
    reference, ref_vectors = _reference(args, posts, probe)
    check = posts[:32]
    ours = probe.encode_dense(check)
    cosines = np.sum(ours * ref_vectors[:32], axis=1) / np.linalg.norm(ref_vectors[:32], axis=1)
    report = {
        "command": shlex.join(["python", "-m", "benchmarks.gpu_check", *(argv or sys.argv[1:])]),
        "hardware": _hardware(),
        "versions": _versions(),
        "bundle": probe.version,
        "posts": args.posts,
        "corpus": {"posts": len(corpus), "cycles": cycles},
        "workers": args.workers,
        "threads": args.threads,
        "task_posts": args.task_posts,
        "worker": worker,
        "reference": reference,
        "ratio": worker["posts_per_s"] / reference["posts_per_s"],
        "cosine_min": float(np.min(cosines)),
        "load_average": {"start": round(load0, 2), "end": round(os.getloadavg()[0], 2)},
    }
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(f"# {report['command']}")
    print(f"# {report['hardware']}; {report['versions']}; load average {report['load_average']}")
    print(f"# bundle {probe.version}; {args.posts} Travel posts ({len(corpus)} in the corpus, {cycles} pass(es) "
          f"over it, each copy its own id); {args.workers} worker process(es) x {args.threads} stream(s), tasks of "
          f"{args.task_posts}; the worker ran on {', '.join(worker['runs_on'])}")
    print(f"worker encoding path (index_batch into a null sink): {worker['posts_per_s']:,.0f} posts/s "
          f"({worker['wall_s']:.2f} s; {worker['written']} written, {worker['failed']} failed; bundles loaded in "
          f"{worker['load_s']:.1f} s, untimed)")
    print(f"torch reference ({reference['dtype']}, {reference['device']}, sorted, batch {args.ref_batch}): "
          f"{reference['posts_per_s']:,.0f} posts/s ({reference['wall_s']:.2f} s)")
    print(f"ratio worker / reference: {report['ratio']:.3f}; cosine(bundle fp32 CPU, reference) of 32 posts: "
          f"min {report['cosine_min']:.5f}")
    return 0 if worker["failed"] == 0 and worker["written"] == args.posts else 1


if __name__ == "__main__":
    from benchmarks import run_main

    run_main(main)
