"""Where the time of an ingest batch goes, step by step (a benchmark, not a test).

    python -m benchmarks.ingest_profile --bundle B [--posts 400] [--threads 2]

Runs the steps of :func:`semdup.indexer.batch_writer.index_batch` one at a time over ``--posts`` Travel posts in
batches of ``--batch`` (a seeded sample), and prints, per step, wall and CPU milliseconds per post of this
process, and for the bulk write also the OpenSearch node's own CPU (``/proc``):

* parse (``Post.from_json``), the text pipeline (cleaning title + body, the titles alone), the wordpiece
  tokeniser (bodies, titles);
* the encoder: bodies (``Bundle.encode_dense``) and titles (``Bundle.encode_titles``), each tokenising again;
* the BOW terms (vocabulary ids, weights);
* ``document_fields`` as the indexer calls it (all of the above in one call: texts and titles tokenised once and
  encoded as one length-sorted pool, ``--threads`` streams); with ``--windows 32,50`` also over the batch in
  windows of that many posts (index_batch's chunks), with ``--seq-batches 4,6`` with that many sequences per call;
* packing: the lexical document and the ``semdup`` object of every post;
* the bulk write of those documents into a fresh node of its own (k-NN index as the default reranker reads).

The steps overlap in ``index_batch`` (the bulk write of one chunk runs while the next is encoded); here each is
timed alone. The load average is printed: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.indexing import _hardware, _versions
from benchmarks.neural_search_peer import _proc_cpu, _sample


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--posts", type=int, default=400)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--windows", default="", help="also time document_fields over the batch in windows of these "
                    "many posts, comma-separated (index_batch's chunks: what one length-sorted pool holds)")
    ap.add_argument("--seq-batches", default="", help="also time document_fields with these many sequences per "
                    "encoder call, comma-separated (the bundle's default: 8 on CPU)")
    ap.add_argument("--threads", type=int, default=2, help="cores the encoder runs on: that many streams of one "
                    "onnxruntime thread each, as `semdup worker` runs")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    from semdup.bundle.bundle import Bundle
    from semdup.core.posts import Post
    from semdup.core.scoring import title_posts
    from semdup.core.settings import OpenSearchSettings
    from semdup.core.wordpiece import wordpiece_text
    from semdup.data.paths import travel_dir
    from semdup.data.stackexchange import load_stackexchange_dump
    from semdup.devstack.local_opensearch import LocalOpenSearch
    from semdup.devstack.local_process import any_free_port, read_record
    from semdup.index_format.documents import lexical_document
    from semdup.indexer.batch_writer import _semdup_fields, ensure_index_model
    from semdup.ingest.lexical_index import create_index
    from semdup.opensearch_io.bulk import bulk_write
    from semdup.opensearch_io.clients import connect

    bundle = Bundle.load(args.bundle, device="cpu", intra_op_threads=1, streams=args.threads)  # as a worker runs it
    posts, _ = _sample(load_stackexchange_dump(travel_dir()).corpus(), args.posts, args.seed)
    payloads = [p.to_json() for p in posts]
    settings = bundle.pipeline.settings
    tok = getattr(bundle.pipeline, "wordpiece_tokenizer", None)
    workdir = Path(tempfile.mkdtemp(prefix="semdup-ingest-profile-"))
    workdir.chmod(0o711)  # the node runs as an unprivileged account when we are root
    node = LocalOpenSearch(state_dir=workdir / "node", port=any_free_port())
    steps: dict[str, list[float]] = {}
    load0 = os.getloadavg()[0]

    def timed(name: str, fn: Callable[[], Any], node_pid: int | None = None) -> Any:
        n0 = _proc_cpu(node_pid) if node_pid else 0.0
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        row = steps.setdefault(name, [0.0, 0.0, 0.0])
        row[0] += time.perf_counter() - t0
        row[1] += time.process_time() - c0
        row[2] += (_proc_cpu(node_pid) - n0) if node_pid else 0.0
        return out

    try:
        client = connect(OpenSearchSettings(url=node.start(), timeout=120))
        pid = read_record(node.state_file).pid
        index = "profile"
        create_index(client, index, dimension=bundle.dimension, knn=True, recreate=True)
        search = ensure_index_model(client, index, bundle.version)
        bundle.document_fields(posts[:4])  # warm-up
        for start in range(0, len(payloads), args.batch):
            batch = payloads[start : start + args.batch]
            ps = timed("parse", lambda: [Post.from_json(o) for o in batch])
            timed("text pipeline: title + body", lambda: [wordpiece_text(p, settings) for p in ps])
            texts = [wordpiece_text(p, settings) for p in ps]
            _, titles = title_posts(ps)
            timed("text pipeline: titles", lambda: [wordpiece_text(p, settings) for p in titles])
            if tok is not None:
                timed("tokenise: title + body", lambda: tok.encode_batch(texts))
                timed("tokenise: titles", lambda: tok.encode_batch([wordpiece_text(p, settings) for p in titles]))
            timed("encoder: bodies (encode_dense)", lambda: bundle.encode_dense(ps))
            if bundle.uses_title:
                timed("encoder: titles (encode_titles)", lambda: bundle.encode_titles(ps))
            if bundle.term_weights is not None:
                ids = timed("BOW: vocabulary ids", lambda: bundle._text_ids(ps))
                timed("BOW: weights", lambda: bundle._term_weights(ids))
            fields = timed("document_fields (all of the above)", lambda: bundle.document_fields(ps))
            for w in [int(x) for x in args.windows.split(",") if x]:
                timed(f"document_fields, windows of {w} posts",
                      lambda w=w: [bundle.document_fields(ps[i : i + w]) for i in range(0, len(ps), w)])
            for n in [int(x) for x in args.seq_batches.split(",") if x]:
                timed(f"document_fields, {n} sequences per call", lambda n=n: bundle.document_fields(ps, n))
            actions = timed("packing: lexical doc + semdup fields", lambda: [
                {"_op_type": "index", "_index": index, "_id": p.id,
                 "_source": {**lexical_document(p, None), "semdup": _semdup_fields(p, f, search)}}
                for p, f in zip(ps, fields, strict=True)])
            timed("bulk write (client | node CPU)",
                  lambda: bulk_write(client, actions, total=len(actions), chunk_size=len(actions)), pid)
    finally:
        node.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    n = len(posts)
    wp = [len(e.ids) for e in tok.encode_batch([wordpiece_text(p, settings) for p in posts])] if tok else [0]
    print(f"# {shlex.join(['python', '-m', 'benchmarks.ingest_profile', *(argv or sys.argv[1:])])}")
    print(f"# {_hardware()}; {_versions()}")
    print(f"# bundle {bundle.version}; {n} Travel posts (seed {args.seed}, {np.mean(wp):.1f} wordpieces on average) "
          f"in batches of {args.batch}; {args.threads} encoder streams; load average {load0:.2f} at start, "
          f"{os.getloadavg()[0]:.2f} at the end")
    print(f"{'step':<40} {'wall ms/post':>13} {'CPU ms/post':>12} {'node CPU ms/post':>17}")
    for name, (wall, cpu, node_cpu) in steps.items():
        print(f"{name:<40} {1e3 * wall / n:13.2f} {1e3 * cpu / n:12.2f} {1e3 * node_cpu / n:17.2f}")
    return 0


if __name__ == "__main__":
    from benchmarks import run_main

    run_main(main)
