"""Encoder throughput: text pipeline, model alone, and both together, on CPU or a CUDA GPU (not a test).

    python -m benchmarks.encoder_throughput --checkpoint artifacts/bow-cnn-travel \
        --device cuda --posts 500000 --workers 16

What one run prints, all on the same weights and the same posts (the Travel dump, repeated to ``--posts``):

* text pipeline posts/s with ``--workers`` processes: clean → tokenise → ids, plus the term frequencies a
  worker needs for the learned BOW weights (the same tokens feed both, as in serving);
* model-only posts/s: the dense encoder on pre-built batches (fp32, and fp16 autocast on CUDA);
* end to end posts/s: worker processes feed the model batch by batch (pipeline and model overlap);
* the ratio of end to end to the model alone, which says whether the text pipeline is the bottleneck.

The GPU machine this project is lent has torch with CUDA but only the CPU build of onnxruntime, so GPU
figures come from the torch module that ``semdup export`` writes to ONNX (same weights, parity ≤ 1e-4).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import time
from collections import Counter
from collections.abc import Sequence

import numpy as np

from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary

_PIPELINE: TextPipeline | None = None


def _init_worker(settings: dict, vocab_path: str) -> None:
    global _PIPELINE
    _PIPELINE = TextPipeline(TextPipelineSettings.from_dict(settings), Vocabulary.load(vocab_path))


def _prepare(chunk: Sequence[tuple[str, str, str]]) -> tuple[np.ndarray, int]:
    """One chunk of posts → padded ids [B, L] and the number of (id, count) BOW entries computed."""
    p = _PIPELINE
    assert p is not None
    rows, n_terms = [], 0
    for pid, title, body in chunk:
        ids = p.ids(p.text_tokens(Post(pid, title, body)))
        n_terms += len(Counter(ids))
        rows.append(ids)
    width = max(3, max((len(r) for r in rows), default=3))
    out = np.zeros((len(rows), width), dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out, n_terms


def _chunks(posts: Sequence[tuple[str, str, str]], size: int):
    for i in range(0, len(posts), size):
        yield posts[i : i + size]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="a text_ids checkpoint from `semdup train` (bow-cnn, cnn)")
    ap.add_argument("--dump", default=None, help="Stack Exchange dump folder (default: the shipped Travel dump)")
    ap.add_argument("--posts", type=int, default=50_000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--model-repeats", type=int, default=5)
    args = ap.parse_args(argv)

    import torch

    from semdup.data import load_stackexchange_dump
    from semdup.data.paths import travel_dir
    from semdup.training.checkpoint import load_checkpoint

    model, pipeline, config = load_checkpoint(args.checkpoint)
    if model.input_kind != "text_ids":
        raise SystemExit(
            f"this benchmark reads text_ids models (bow-cnn, cnn); {config['arch']} reads {model.input_kind}"
        )
    corpus = load_stackexchange_dump(args.dump or travel_dir()).corpus()
    base = [(p.id, p.title, p.body) for p in corpus]
    posts = [base[i % len(base)] for i in range(args.posts)]
    vocab_path = os.path.join(args.checkpoint, "vocab.json")
    settings = pipeline.settings.to_dict()
    device = torch.device(args.device)
    encoder = model.dense_encoder().to(device).eval()

    print(f"# {' '.join(['python -m benchmarks.encoder_throughput'] + (argv or os.sys.argv[1:]))}")
    print(f"# host {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}, torch {torch.__version__}, numpy {np.__version__}")
    if device.type == "cuda":
        print(f"# device {torch.cuda.get_device_name(0)}")
    print(f"# {args.posts} posts (Travel dump repeated), arch {config['arch']}, "
          f"max_tokens {pipeline.settings.max_tokens}, batch {args.batch}, {args.workers} pipeline processes")

    ctx = mp.get_context("fork")
    # 1. text pipeline alone, in worker processes
    with ctx.Pool(args.workers, initializer=_init_worker, initargs=(settings, vocab_path)) as pool:
        t0 = time.perf_counter()
        batches = list(pool.imap(_prepare, _chunks(posts, args.batch), chunksize=1))
        t_pipe = time.perf_counter() - t0
    pipe_rate = len(posts) / t_pipe
    print(f"text pipeline ({args.workers} processes): {pipe_rate:12,.0f} posts/s")

    # 2. model alone on pre-built batches
    tensors = [torch.from_numpy(b).to(device) for b, _ in batches]

    def run_model(autocast: bool) -> float:
        with torch.inference_mode(), torch.autocast(device.type, dtype=torch.float16, enabled=autocast):
            for t in tensors[:2]:
                encoder(t)  # warm-up
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.model_repeats):
                for t in tensors:
                    encoder(t)
            if device.type == "cuda":
                torch.cuda.synchronize()
            return args.model_repeats * len(posts) / (time.perf_counter() - t0)

    model_rate = run_model(False)
    print(f"model only, fp32:                {model_rate:12,.0f} posts/s")
    best_model = model_rate
    if device.type == "cuda":
        fp16 = run_model(True)
        print(f"model only, fp16 autocast:       {fp16:12,.0f} posts/s")
        best_model = max(model_rate, fp16)
    use_fp16 = device.type == "cuda" and best_model != model_rate

    # 3. end to end: processes run the pipeline while the model encodes
    with ctx.Pool(args.workers, initializer=_init_worker, initargs=(settings, vocab_path)) as pool:
        t0 = time.perf_counter()
        n = 0
        with torch.inference_mode(), torch.autocast(device.type, dtype=torch.float16, enabled=use_fp16):
            for ids, _ in pool.imap(_prepare, _chunks(posts, args.batch), chunksize=1):
                out = encoder(torch.from_numpy(ids).to(device, non_blocking=True))
                n += len(ids)
            if device.type == "cuda":
                torch.cuda.synchronize()
            _ = out.float().cpu()
        t_e2e = time.perf_counter() - t0
    e2e = n / t_e2e
    print(f"text pipeline + model (end to end, {'fp16' if use_fp16 else 'fp32'}): {e2e:12,.0f} posts/s")
    print(f"ratio end-to-end / model-only: {e2e / best_model:.3f}   (1.0 = the model is the bottleneck)")


if __name__ == "__main__":
    main()
