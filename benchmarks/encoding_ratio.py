"""CPU encoding posts/s: a MiniLM bundle through onnxruntime vs sentence-transformers (torch), one run (not a test).

    python -m benchmarks.encoding_ratio --bundle artifacts/demo/default-minilm-travel \
        --posts 2000 --threads 2 --int8 auto

Issue #11's target is ≥ 2× sentence-transformers' posts/s. Every contender encodes the same Travel posts (a
seeded sample of the dump, each cleaned as the bundle cleans it and cut at the bundle's max_len wordpieces) on
the same number of threads (``torch.set_num_threads`` / onnxruntime ``intra_op_num_threads``):

* ``st``: ``SentenceTransformer(...).encode(texts, batch_size=32, normalize_embeddings=True)`` on the bundle's
  base encoder folder (the same weights), with its own length sorting over the texts it is given;
* ``inorder``: the bundle's encoder as the indexer ran it before length sorting: 32-post chunks
  (``INDEX_CHUNK``), each one in-order batch of up to 64 posts padded to its longest;
* ``bundle``: ``Bundle.document_fields`` on 32-post chunks, as ``index_batch`` called it on 64-post tasks until
  issue #28 (a transformer bundle's task is now one chunk up to 128 posts: ``batch_writer.chunk_size_for``);
* ``chunk-bs<k>``: the same calls with ``batch_size=k``;
* ``sorted-bs<k>``: one ``Bundle.encode_dense(slice, batch_size=k)`` per round (length-sorted over the slice,
  as ``st`` sorts);
* ``spin`` (``--spin``): ``document_fields`` as ``bundle``, its onnxruntime pool threads spinning between
  operators (onnxruntime's default; semdup's sessions sleep instead, :func:`semdup.bundle.verify.make_session`);
* ``also-<version>`` (``--also B2``): ``document_fields`` as ``bundle`` through another bundle of the same
  encoder (another export of it: e.g. one traced with the SDPA attention);
* ``int8``: ``document_fields`` as ``bundle``, through the int8 encoder (``--int8 PATH`` or ``--int8 auto``:
  the bundle's encoder through :func:`semdup.export.quantize.quantize_encoder`, in a temporary bundle).

The machine is shared, so load changes during a run: the posts are cut into rounds of ``--round-posts`` and
every contender encodes each round's slice before the next round starts (the order rotating round by round).
Per contender it prints posts/s (total posts / total wall seconds), the process CPU seconds per post, and the
ratio of posts/s to ``st``. It checks the vectors: the cosine of each post's ``st`` and ``bundle`` vectors (min
printed) and the largest |difference| of every other contender's vectors from ``bundle``'s.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from benchmarks.indexing import _hardware, _versions
from semdup.bundle.bundle import ENCODER_FILE, Bundle, read_bundle_files, write_bundle
from semdup.core.inputs import build_inputs
from semdup.core.posts import Post

INDEX_CHUNK = 32  # posts per document_fields call in index_batch of a 64-post task (batch_writer.chunk_size_for)
OLD_BATCH = 64  # the bundle's in-order batch size before length sorting

Encoder = Callable[[Sequence[Post], Sequence[str]], np.ndarray]


def _chunked(fn: Callable[[Sequence[Post]], np.ndarray], posts: Sequence[Post]) -> np.ndarray:
    return np.concatenate([fn(posts[i : i + INDEX_CHUNK]) for i in range(0, len(posts), INDEX_CHUNK)])


def _fields(bundle: Bundle, posts: Sequence[Post], batch_size: int | None = None) -> np.ndarray:
    return np.asarray([f["vector"] for f in bundle.document_fields(posts, batch_size=batch_size)], dtype=np.float32)


def _in_order(bundle: Bundle, posts: Sequence[Post]) -> np.ndarray:
    """The encoding before length sorting: in-order batches of ``OLD_BATCH`` padded to their longest post."""
    x = np.concatenate(
        [
            bundle.run_encoder(build_inputs(bundle.input_kind, bundle.pipeline, posts[i : i + OLD_BATCH]))
            for i in range(0, len(posts), OLD_BATCH)
        ]
    )
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _int8_bundle(src: str, tmp: str) -> Path:
    """A temporary copy of bundle ``src`` whose encoder is quantised to int8 (a new version, same manifest)."""
    import json

    from semdup.export.quantize import quantize_encoder

    files = read_bundle_files(src)
    manifest = json.loads(files.pop("manifest.json"))
    files[ENCODER_FILE] = quantize_encoder(files[ENCODER_FILE])
    return write_bundle(Path(tmp) / "int8", files, manifest)


def _sample(n: int, seed: int, dump: str | None) -> list[Post]:
    from semdup.data import load_stackexchange_dump
    from semdup.data.paths import travel_dir

    corpus = list(load_stackexchange_dump(dump or travel_dir()).corpus())
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(corpus), size=n, replace=n > len(corpus))
    return [corpus[int(i)] for i in picks]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True, help="a wordpiece (MiniLM / MPNet) bundle directory or .tar.gz")
    ap.add_argument("--posts", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--round-posts", type=int, default=250, help="posts per round; contenders alternate per round")
    ap.add_argument("--st-batch", type=int, default=32, help="sentence-transformers' batch size")
    ap.add_argument("--batches", default="", help="extra chunk-bs<k> contenders, comma-separated k (e.g. 1,4,16)")
    ap.add_argument("--sorted", default="32", help="sorted-bs<k> contenders, comma-separated k ('' for none)")
    ap.add_argument("--int8", default=None, help="an int8 bundle, or 'auto' to quantise --bundle's encoder")
    ap.add_argument("--no-inorder", action="store_true", help="skip the pre-sorting path")
    ap.add_argument("--spin", action="store_true", help="also the bundle with spinning onnxruntime pool threads")
    ap.add_argument("--also", action="append", default=[], help="another bundle of the same encoder (repeatable)")
    ap.add_argument("--dump", default=None, help="Stack Exchange dump folder (default: the shipped Travel dump)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import torch
    from sentence_transformers import SentenceTransformer

    from semdup.core.wordpiece import wordpiece_text
    from semdup.training.base_encoders import base_encoder_dir

    torch.set_num_threads(args.threads)
    bundle = Bundle.load(args.bundle, providers=["CPUExecutionProvider"], intra_op_threads=args.threads)
    if bundle.input_kind != "wordpiece":
        raise SystemExit(f"this benchmark compares base-encoder bundles (wordpiece); {args.bundle} is {bundle.arch}")
    base = bundle.manifest["base_encoder"]["name"]
    max_len = int(bundle.manifest["tokenizer"]["max_len"])
    st = SentenceTransformer(str(base_encoder_dir(base)), device="cpu")
    st.max_seq_length = max_len
    posts = _sample(args.posts, args.seed, args.dump)
    texts = [wordpiece_text(p, bundle.pipeline.settings) for p in posts]

    contenders: dict[str, Encoder] = {
        "st": lambda ps, ts: st.encode(
            list(ts),
            batch_size=args.st_batch,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        ),
        "bundle": lambda ps, ts: _chunked(lambda c: _fields(bundle, c), ps),
    }
    if not args.no_inorder:
        contenders["inorder"] = lambda ps, ts: _chunked(lambda c: _in_order(bundle, c), ps)
    for k in (int(x) for x in args.batches.split(",") if x):
        contenders[f"chunk-bs{k}"] = lambda ps, ts, k=k: _chunked(lambda c: _fields(bundle, c, k), ps)
    for k in (int(x) for x in args.sorted.split(",") if x):
        contenders[f"sorted-bs{k}"] = lambda ps, ts, k=k: bundle.encode_dense(ps, batch_size=k)
    if args.spin:
        spin = Bundle.load(args.bundle, providers=["CPUExecutionProvider"], intra_op_threads=args.threads,
                           allow_spinning=True)
        contenders["spin"] = lambda ps, ts: _chunked(lambda c: _fields(spin, c), ps)
    for path in args.also:
        other = Bundle.load(path, providers=["CPUExecutionProvider"], intra_op_threads=args.threads)
        contenders[f"also-{other.version.rsplit('-', 1)[-1]}"] = (
            lambda ps, ts, other=other: _chunked(lambda c: _fields(other, c), ps))
    tmp = tempfile.TemporaryDirectory(prefix="semdup-encoding-ratio-")
    if args.int8:
        path = _int8_bundle(args.bundle, tmp.name) if args.int8 == "auto" else Path(args.int8)
        int8 = Bundle.load(path, providers=["CPUExecutionProvider"], intra_op_threads=args.threads)
        contenders["int8"] = lambda ps, ts: _chunked(lambda c: _fields(int8, c), ps)

    lengths = [len(e.ids) for e in bundle.pipeline.wordpiece_tokenizer.encode_batch(texts)]
    print(f"# {shlex.join(['python', '-m', 'benchmarks.encoding_ratio', *(argv or sys.argv[1:])])}")
    print(f"# host: {_hardware()}; load average at start {os.getloadavg()[0]:.2f} (shared machine)")
    print(
        f"# {_versions()}, torch {torch.__version__}, sentence-transformers "
        f"{__import__('sentence_transformers').__version__}"
    )
    print(
        f"# bundle {bundle.version} ({base}, max_len {max_len}; st max_seq_length {st.max_seq_length}); "
        f"{len(posts)} Travel posts (seed {args.seed}), wordpieces mean {np.mean(lengths):.1f}, "
        f"{np.mean(np.asarray(lengths) >= max_len):.1%} cut at {max_len}; {args.threads} threads each; "
        f"rounds of {args.round_posts} posts, contenders alternating"
    )

    names = list(contenders)
    for name in names:  # warm-up: first calls allocate, load kernels
        contenders[name](posts[:4], texts[:4])
    wall = dict.fromkeys(names, 0.0)
    cpu = dict.fromkeys(names, 0.0)
    vectors: dict[str, list[np.ndarray]] = {n: [] for n in names}
    loads = []
    for r, start in enumerate(range(0, len(posts), args.round_posts)):
        ps, ts = posts[start : start + args.round_posts], texts[start : start + args.round_posts]
        for name in names[r % len(names) :] + names[: r % len(names)]:
            c0, t0 = time.process_time(), time.perf_counter()
            vectors[name].append(np.asarray(contenders[name](ps, ts), dtype=np.float32))
            wall[name] += time.perf_counter() - t0
            cpu[name] += time.process_time() - c0
        loads.append(os.getloadavg()[0])
    print(f"# load average after each round: {' '.join(f'{x:.1f}' for x in loads)}")

    got = {n: np.concatenate(v) for n, v in vectors.items()}
    cos = np.sum(got["st"].astype(np.float64) * got["bundle"], axis=1)
    print(f"cosine(st, bundle) per post: min {cos.min():.7f}, mean {cos.mean():.7f}")
    st_rate = len(posts) / wall["st"]
    print(f"{'contender':<18} {'posts/s':>9} {'CPU s/post':>11} {'ratio to st':>12} {'max |Δ| vs bundle':>18}")
    for n in names:
        rate = len(posts) / wall[n]
        diff = float(np.max(np.abs(got[n] - got["bundle"])))
        print(f"{n:<18} {rate:9.2f} {cpu[n] / len(posts):11.4f} {rate / st_rate:12.2f} {diff:18.2e}")
    tmp.cleanup()


if __name__ == "__main__":
    main()
