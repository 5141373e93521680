"""``semdup demo``: the main job on the embedded default, from nothing to the quality tables.

1. OpenSearch (Maven Central distribution) and Redis (Debian's redis-server) are started unless running or configured.
2. Lexical baselines through the stored search templates: SemEval-2016 test and Travel test.
3. BOW-CNN is trained on the Travel train split (or reused), exported to a verified ONNX bundle (or reused).
4. A real Celery worker process indexes every Travel post through Redis: text pipeline, ONNX encoder, bulk write.
5. The reranker answers each Travel test query (stored-template + learned-sparse [+ k-NN] candidates, fusion),
   and the table puts its figures beside the lexical ones.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click

__all__ = ["demo"]

IR_BASELINE_TEST = {"MAP": 74.75, "MRR": 83.79, "P@1": 81.43}
DEMO_INDEX = "semdup-demo-travel"


def _ensure_opensearch() -> str:
    url = os.environ.get("SEMDUP_OPENSEARCH_URL") or os.environ.get("OPENSEARCH_URL")
    if url:
        return url
    from semdup.devstack.local_opensearch import LocalOpenSearch, running_url

    url = running_url()
    if url:
        return url
    click.echo("Starting the embedded OpenSearch (first run: fetched from Maven Central and unpacked)...", err=True)
    return LocalOpenSearch().start()


def _ensure_broker() -> str:
    url = os.environ.get("SEMDUP_BROKER_URL")
    if url:
        return url
    from semdup.devstack.local_redis import LocalRedis, running_url

    return running_url() or LocalRedis().start()


def _semdup(*args: str, env: dict[str, str]) -> None:
    """Run one semdup step as its own process, as a user would; its progress goes to the terminal."""
    cmd = [sys.executable, "-m", "semdup", *args]
    click.echo(f"$ semdup {' '.join(args)}", err=True)
    proc = subprocess.run(cmd, env=env)
    if proc.returncode != 0:
        raise click.ClickException(f"step failed (exit {proc.returncode}): semdup {' '.join(args)}")


def _row(name: str, metrics: dict[str, float], cols: tuple[str, ...]) -> str:
    return f"{name:<34}" + "".join(f"{metrics[c]:8.2f}" for c in cols)


@click.command("demo")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=Path("artifacts/demo"),
              show_default=True, help="Where the model checkpoint and bundle are built (reused when present).")
@click.option("--skip-neural", is_flag=True, help="Only the lexical tables (no training, worker or reranker).")
def demo(workdir: Path, skip_neural: bool) -> None:
    """Start the embedded OpenSearch and Redis, train, export, index through Celery, rerank, print the tables.

    \b
    Example:
      semdup demo                # or, on a fresh machine: bash scripts/demo.sh
      semdup demo --skip-neural  # lexical baselines only
    """
    from semdup.core.clients import connect
    from semdup.core.settings import OpenSearchSettings
    from semdup.data import load_semeval_xml, load_stackexchange_dump
    from semdup.data.paths import semeval_files, travel_dir
    from semdup.evaluation.methods import parse_method
    from semdup.evaluation.semeval_eval import run_semeval
    from semdup.evaluation.stackexchange_eval import run_stackexchange
    from semdup.index_format.schema import LEXICAL_MODELS

    url = _ensure_opensearch()
    client = connect(OpenSearchSettings.from_env(env={**os.environ, "SEMDUP_OPENSEARCH_URL": url}))
    click.echo(f"OpenSearch: {url}")
    methods = [parse_method(m) for m in LEXICAL_MODELS]

    sem = load_semeval_xml(*semeval_files("test"), name="test-2016")
    rows = {mode: run_semeval(sem, methods, client=client, mode=mode) for mode in ("rerank", "retrieve")}
    cols = ("MAP", "MRR", "P@1")
    click.echo("\nSemEval-2016 Task 3 subtask B, test 2016 (official MAP / MRR / P@1)")
    click.echo(f"{'method':<34}" + "".join(f"{c:>8}" for c in cols))
    click.echo(_row("IR baseline (organisers)", IR_BASELINE_TEST, cols))
    for mode, runs in rows.items():
        for r in runs:
            click.echo(
                _row(f"{r.method} ({mode}, k=20)" if mode == "retrieve" else f"{r.method} ({mode})", r.metrics, cols)
            )

    dump = load_stackexchange_dump(travel_dir())
    travel = run_stackexchange(dump, "test", methods, client=client)
    neural = [] if skip_neural else _neural_travel(client, url, dump, workdir)
    tcols = ("Acc@1", "Acc@5", "Acc@10", "MAP", "MRR")
    click.echo("\nTravel Stack Exchange, test split: 231 queries, retrieval over all 4,919 posts")
    click.echo(f"{'method':<34}" + "".join(f"{c:>8}" for c in tcols))
    for r in travel:
        click.echo(_row(r.method, r.metrics, tcols))
    for name, metrics in neural:
        click.echo(_row(name, metrics, tcols))
    click.echo("\nThe embedded OpenSearch and Redis keep running: `semdup opensearch stop`, `semdup broker stop`.")


def _neural_travel(client, os_url: str, dump, workdir: Path) -> list[tuple[str, dict[str, float]]]:
    from semdup.core.clients import knn_available
    from semdup.core.metrics import retrieval_scores
    from semdup.data.paths import travel_dir
    from semdup.reranker import Reranker

    broker = _ensure_broker()
    env = {**os.environ, "SEMDUP_OPENSEARCH_URL": os_url, "SEMDUP_BROKER_URL": broker}
    workdir.mkdir(parents=True, exist_ok=True)
    ckpt, bundle = workdir / "bow-cnn-travel", workdir / "bow-cnn-travel.bundle"
    if not (ckpt / "metrics.json").exists():
        # one thread: bit-reproducible (two 2-thread runs gave dev MAP 40.94 and 41.87: CPU sums in another order)
        _semdup("train", "--arch", "bow-cnn", "--data", "travel", "--threads", "1", "--out", str(ckpt), env=env)
    else:
        click.echo(f"Reusing the trained checkpoint {ckpt}", err=True)
    if not (bundle / "manifest.json").exists():
        _semdup("export", "--checkpoint", str(ckpt), "--out", str(bundle), env=env)
    else:
        click.echo(f"Reusing the bundle {bundle}", err=True)

    # A real Celery worker process indexes the corpus through Redis; index-posts enqueues and waits.
    client.indices.delete(index=DEMO_INDEX, ignore_unavailable=True)
    click.echo(f"$ semdup worker --bundle {bundle}   (in the background)", err=True)
    worker = subprocess.Popen([sys.executable, "-m", "semdup", "worker", "--bundle", str(bundle), "-c", "1",
                               "--loglevel", "WARNING"], env=env, start_new_session=True)
    knn = knn_available(client)
    # both hybrid candidate paths are shown below, so the index gets their search structures (off by default)
    hybrid = ["--sparse", "--knn"] if knn else ["--sparse"]
    try:
        _semdup("index-posts", "--input", str(travel_dir()), "--index", DEMO_INDEX, "--bundle", str(bundle), *hybrid,
                env=env)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)

    results = []
    for label, sparse, use_knn in (
        ("bm25 candidates", False, False),
        ("bm25+lmj+dfr+ib+sparse" + ("+knn" if knn else ""), True, knn),
    ):
        reranker = Reranker.from_bundle(bundle, client, DEMO_INDEX, templates=("bm25",) if not sparse else
                                        ("bm25", "lmj", "dfr", "ib"), sparse=sparse, knn=use_knn, k_candidates=100)
        queries = dump.queries("test")
        ranked = {}
        t0 = time.perf_counter()
        for q in queries:
            ranked[q.post.id] = [c.id for c in reranker.rank(q.post, k=100, exclude_id=q.post.id)]
        per_query = (time.perf_counter() - t0) / max(len(queries), 1)
        metrics = retrieval_scores(ranked, {q.post.id: set(q.relevant) for q in queries}, cutoff=100)
        click.echo(f"reranker ({label}): {per_query * 1000:.0f} ms per query", err=True)
        results.append((f"bow-cnn reranker ({label})", metrics))
    return results
