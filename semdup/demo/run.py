"""``semdup demo`` as a library call: the main job on the embedded default, from nothing to one quality table.

1. OpenSearch (Maven Central distribution) and Redis (Debian's redis-server) are started unless running or configured.
2. The six lexical models through the stored search templates: Travel test, SemEval-2016 test, AskUbuntu pairs.
3. The hybrid default is built from packages, no GPU: the base encoder's bundle (``semdup export --base-encoder``),
   then ``semdup fit-default`` per data set (corpus IDF as bag-of-words weights, BM25 lexnorm, the fusion weights
   chosen on that set's dev data only).
4. A real Celery worker process indexes every Travel post through Redis with the default (``--sparse --knn``);
   SemEval and AskUbuntu posts go through the worker's own ``index_batch``. The reranker answers every query
   (BM25 ∪ k-NN candidates); the MiniLM peer is the same stored vectors ranked by cosine alone.
5. One table: the default, the peer and the lexical models on the three sets (test), the default's dev figures
   beside, candidate recall, and where the paper models' figures come from (``--paper`` trains BOW-CNN here).
6. With ``--learn``: ``semdup learn`` on SemEval and AskUbuntu (their test sides never read), and a "learned on the
   site" row: the bundle each gate kept, tested once as the default is.
7. With ``--review``: a review page with real flags on the Travel index, served until Ctrl-C
   (:mod:`semdup.demo.review`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from semdup.core.errors import SemdupError
from semdup.demo.result import LEARNED, DemoResult

__all__ = ["run", "ensure_opensearch", "ensure_broker", "semdup_step", "start_semdup", "stop_process", "to_stderr",
           "DEMO_INDEX"]

DEMO_INDEX = "semdup-demo-travel"
Say = Callable[[str], None]


def to_stderr(line: str) -> None:
    """The default ``say``: one progress line on stderr, as the CLI writes them."""
    print(line, file=sys.stderr, flush=True)


def ensure_opensearch(configured: str | None, say: Say = to_stderr) -> str:
    """``configured`` (a cluster of your own: SEMDUP_OPENSEARCH_URL or the config file), else the embedded node's
    URL, started when it is not running."""
    if configured is not None:
        return configured
    from semdup.devstack.local_opensearch import LocalOpenSearch, running_url

    url = running_url()
    if url:
        return url
    say("Starting the embedded OpenSearch (first run: fetched from Maven Central and unpacked)...")
    return LocalOpenSearch().start()


def ensure_broker(configured: str | None) -> str:
    """``configured``, else the embedded Redis's URL, started when it is not running."""
    if configured is not None:
        return configured
    from semdup.devstack.local_redis import LocalRedis, running_url

    return running_url() or LocalRedis().start()


def semdup_step(*args: str, env: dict[str, str], say: Say = to_stderr) -> None:
    """Run one semdup step as its own process, as a user would; its progress goes to the terminal."""
    cmd = [sys.executable, "-m", "semdup", *args]
    say(f"$ semdup {' '.join(args)}")
    proc = subprocess.run(cmd, env=env)
    if proc.returncode != 0:
        raise SemdupError(f"step failed (exit {proc.returncode}): semdup {' '.join(args)}")


def start_semdup(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    """``semdup ARGS`` in the background, in a session of its own (so :func:`stop_process` stops its children)."""
    return subprocess.Popen([sys.executable, "-m", "semdup", *args], env=env, start_new_session=True)


def stop_process(proc: subprocess.Popen, name: str, say: Say = to_stderr) -> None:
    """SIGTERM to the process's group, SIGKILL after 30 s."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        say(f"{name} did not stop in 30 s; killed")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def run(workdir: Path, client: Any, url: str, *, base_encoder: str = "minilm", skip_neural: bool = False,
        paper: bool = False, learn: bool = False, broker: str | None = None, say: Say = to_stderr) -> DemoResult:
    """The lexical rows, then (unless ``skip_neural``) the defaults built, Travel indexed by a real worker, every
    query reranked; ``paper`` and ``learn`` add their rows. Writes ``<workdir>/demo-results.json``.

    Args:
        client: a client of ``url``, the cluster every step indexes into (``ensure_opensearch``).
        broker: the configured broker URL (None: the embedded Redis, started when needed).

    Raises:
        SemdupError: a step (export, fit-default, index-posts, learn, train) failed.
    """
    t0 = time.perf_counter()
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SEMDUP_OPENSEARCH_URL": url}
    sets = _load_sets()
    rows = _lexical_rows(client, sets)
    dev: dict[str, Any] = {}
    notes: list[str] = []
    bundles: dict[str, Path] = {}
    if not skip_neural:
        env["SEMDUP_BROKER_URL"] = ensure_broker(broker)
        bundles = _build_defaults(workdir, base_encoder, env, say)
        _travel_rows(client, sets, bundles["travel"], env, rows, dev, notes, say)
        _semeval_rows(client, sets, bundles["semeval"], rows, dev)
        _pair_rows(client, sets, bundles["askubuntu"], rows, dev)
        if paper:
            _paper_travel(client, sets, workdir, env, rows, say)
        if learn:
            _learned_rows(client, sets, workdir, base_encoder, bundles, env, rows, notes, say)
    results = workdir / "demo-results.json"
    results.write_text(json.dumps({"test": rows, "dev": dev, "notes": notes}, indent=2))
    stack = {"client": client, "env": env, "travel": sets["travel"], "bundles": bundles}
    return DemoResult(rows, dev, notes, base_encoder, skip_neural, paper, time.perf_counter() - t0, results, stack)


def _load_sets() -> dict[str, Any]:
    from semdup.data import load_pairs_jsonl, load_semeval_xml, load_stackexchange_dump
    from semdup.data.paths import askubuntu_files, semeval_files, travel_dir

    train, test = (load_pairs_jsonl(p) for p in askubuntu_files())
    return {"travel": load_stackexchange_dump(travel_dir()), "semeval_dev": load_semeval_xml(*semeval_files("dev"),
            name="dev"), "semeval": load_semeval_xml(*semeval_files("test"), name="test-2016"),
            "pairs": (train, test)}


def _lexical_rows(client, sets) -> dict[str, dict[str, Any]]:
    """name -> {"travel": metrics, "semeval": metrics, "askubuntu": metrics}; AskUbuntu comes with the default."""
    from semdup.evaluation.methods import parse_method
    from semdup.evaluation.semeval_eval import run_semeval
    from semdup.evaluation.stackexchange_eval import run_stackexchange
    from semdup.index_format.schema import LEXICAL_MODELS

    methods = [parse_method(m) for m in LEXICAL_MODELS]
    rows: dict[str, dict[str, Any]] = {m: {} for m in LEXICAL_MODELS}
    for r in run_stackexchange(sets["travel"], "test", methods, client=client):
        rows[r.method]["travel"] = r.metrics
    for r in run_semeval(sets["semeval"], methods, client=client, mode="rerank"):
        rows[r.method]["semeval"] = r.metrics
    return rows


def _build_defaults(workdir: Path, base_encoder: str, env: dict[str, str], say: Say) -> dict[str, Path]:
    """The base encoder's bundle (from its packages) and one fitted default per data set (reused when present)."""
    from semdup.data.paths import semeval_files

    base = workdir / base_encoder
    if not (base / "manifest.json").exists():
        semdup_step("export", "--base-encoder", base_encoder, "--out", str(base), env=env, say=say)
    out = {}
    corpus = {"semeval": ["--corpus", str(semeval_files("test")[0])]}  # the unlabelled test input joins the IDF
    for data in ("travel", "semeval", "askubuntu"):
        bundle = workdir / f"default-{base_encoder}-{data}"
        if not (bundle / "manifest.json").exists():
            semdup_step("fit-default", "--base-bundle", str(base), "--data", data, *corpus.get(data, []),
                        "--cache", str(workdir / "cache"), "--out", str(bundle), env=env, say=say)
        else:
            say(f"Reusing the fitted default {bundle}")
        out[data] = bundle
    return out


def _index_with_worker(client, bundle: Path, env: dict[str, str], say: Say) -> bool:
    """A real Celery worker process indexes all Travel posts through Redis; returns whether k-NN is on."""
    from semdup.data.paths import travel_dir
    from semdup.opensearch_io.clients import knn_available

    client.indices.delete(index=DEMO_INDEX, ignore_unavailable=True)
    say(f"$ semdup worker --bundle {bundle}   (in the background)")
    worker = start_semdup(["worker", "--bundle", str(bundle), "-c", "1", "--loglevel", "WARNING"], env)
    knn = knn_available(client)
    try:
        semdup_step("index-posts", "--input", str(travel_dir()), "--index", DEMO_INDEX, "--bundle", str(bundle),
                    "--sparse", *(["--knn"] if knn else []), env=env, say=say)
    finally:
        stop_process(worker, "the indexing worker", say)
    return knn


def _travel_rows(client, sets, bundle_path: Path, env, rows, dev, notes, say: Say) -> None:
    from semdup.bundle import Bundle
    from semdup.evaluation.through_reranker import DENSE_ALONE, candidate_recall, rank_queries
    from semdup.measures.ranking import retrieval_scores

    knn = _index_with_worker(client, bundle_path, env, say)
    bundle = Bundle.load(bundle_path)
    fusions = {"default": None, "peer": DENSE_ALONE}
    for split in ("dev", "test"):
        queries = sets["travel"].queries(split)
        t0 = time.perf_counter()
        ranked = rank_queries(client, bundle, DEMO_INDEX, queries, fusions, 100, knn=knn)
        ms = (time.perf_counter() - t0) * 1000 / max(2 * len(queries), 1)
        say(f"Travel {split}: {len(queries)} queries, {ms:.0f} ms per query through the reranker")
        relevant = {q.post.id: set(q.relevant) for q in queries}
        for name, run in ranked.items():
            metrics = retrieval_scores({q: [d for d, _ in hits] for q, hits in run.items()}, relevant, cutoff=100)
            (rows.setdefault(name, {}) if split == "test" else dev.setdefault(name, {}))["travel"] = metrics
    queries = [(q.post, set(q.relevant), q.post.id) for q in sets["travel"].queries("test")]
    paths = ("bm25", "bm25+knn") if knn else ("bm25",)
    recall = candidate_recall(client, bundle, DEMO_INDEX, queries, 100, sets=paths)
    notes.append("Travel test candidate recall (k = 100 per path): " + "; ".join(
        f"{name} {r['recall']:.2f} ({r['candidates']:.1f} candidates)" for name, r in recall.items()))


def _semeval_rows(client, sets, bundle_path: Path, rows, dev) -> None:
    from semdup.evaluation.through_reranker import DENSE_ALONE, semeval_rerank_runs
    from semdup.measures.ranking import semeval_scores

    fusions = {"default": None, "peer": DENSE_ALONE}
    for key, target in (("semeval_dev", dev), ("semeval", rows)):
        sem = sets[key]
        for name, preds in semeval_rerank_runs(client, sem, bundle_path, fusions).items():
            target.setdefault(name, {})["semeval"] = semeval_scores(preds, sem.gold())


def _pair_rows(client, sets, bundle_path: Path, rows, dev) -> None:
    from semdup.evaluation.through_reranker import DENSE_ALONE, pair_accuracy_runs
    from semdup.index_format.schema import LEXICAL_MODELS

    train, test = sets["pairs"]
    runs = pair_accuracy_runs(client, bundle_path, train, test, {"default": None, "peer": DENSE_ALONE},
                              lexical_models=LEXICAL_MODELS)
    for name, r in runs.items():
        rows.setdefault(name, {})["askubuntu"] = {"Acc": r["test"]}
        dev.setdefault(name, {})["askubuntu"] = {"Acc": r["train"]}


_IN = {"encoder": "alone", "carried": "in the default's fusion", "hybrid": "in a fusion fitted on the fold models"}


def _learned_rows(client, sets, workdir: Path, base_encoder: str, bundles: dict[str, Path], env, rows,
                  notes, say: Say) -> None:
    """``semdup learn`` per set, as a user runs it; the row holds the test figures of the bundle its gate kept."""
    from semdup.bundle import Bundle
    from semdup.evaluation.through_reranker import pair_accuracy_runs, semeval_rerank_runs
    from semdup.learn.learn_run import OUTCOME_FILE, work_dir_for
    from semdup.measures.ranking import semeval_scores

    row = rows.setdefault(LEARNED, {})
    for data in ("semeval", "askubuntu"):
        out = workdir / f"learned-{base_encoder}-{data}"
        outcome_file = work_dir_for(out) / OUTCOME_FILE
        if not outcome_file.exists():
            semdup_step("learn", "--data", data, "--base-encoder", base_encoder, "--base-bundle",
                        str(workdir / base_encoder), "--out", str(out), env=env, say=say)
        outcome = json.loads(outcome_file.read_text(encoding="utf-8"))
        test = outcome["decision"]["test"]
        kept = Path(outcome["candidate"]) if outcome["candidate"] else bundles[data]
        notes.append(f"learned on {data}: {outcome['folds']['queries']} queries in folds; out of fold "
                     f"{outcome['decision']['metric']} {test['mean_a']:.2f} -> {test['mean_b']:.2f} "
                     f"(the learned encoder {_IN[outcome['chosen']]}), p = {test['p_value']:.4f} on {test['n']} "
                     "queries: "
                     + ("accepted" if outcome["candidate"] else "the gate kept the default (its figures below)")
                     + f"; {outcome['wall_seconds'] / 60:.1f} min wall, {outcome['cpu_seconds_total'] / 60:.1f} "
                     "min CPU")
        if data == "semeval":
            preds = semeval_rerank_runs(client, sets["semeval"], kept, {"learned": None})["learned"]
            row["semeval"] = semeval_scores(preds, sets["semeval"].gold())
        else:
            train, test_pairs = sets["pairs"]
            threshold = Bundle.load(kept).threshold if outcome["candidate"] else None
            runs = pair_accuracy_runs(client, kept, train, test_pairs, {"learned": None}, threshold=threshold)
            row["askubuntu"] = {"Acc": runs["learned"]["test"]}


def _paper_travel(client, sets, workdir: Path, env, rows, say: Say) -> None:
    """BOW-CNN trained on Travel here (one thread: bit-reproducible), indexed by the worker, BM25 top 100 reranked."""
    from semdup.bundle import Bundle
    from semdup.evaluation.through_reranker import rank_queries
    from semdup.measures.ranking import retrieval_scores

    ckpt, bundle = workdir / "bow-cnn-travel", workdir / "bow-cnn-travel.bundle"
    if not (ckpt / "metrics.json").exists():
        semdup_step("train", "--arch", "bow-cnn", "--data", "travel", "--threads", "1", "--out", str(ckpt), env=env,
                    say=say)
    if not (bundle / "manifest.json").exists():
        semdup_step("export", "--checkpoint", str(ckpt), "--out", str(bundle), env=env, say=say)
    _index_with_worker(client, bundle, env, say)
    queries = sets["travel"].queries("test")
    run = rank_queries(client, Bundle.load(bundle), DEMO_INDEX, queries, {"bow-cnn": None}, 100)["bow-cnn"]
    relevant = {q.post.id: set(q.relevant) for q in queries}
    rows["bow-cnn (paper, trained here)"] = {"travel": retrieval_scores(
        {q: [d for d, _ in hits] for q, hits in run.items()}, relevant, cutoff=100)}


