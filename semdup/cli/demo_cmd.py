"""``semdup demo``: the main job on the embedded default, from nothing to one quality table.

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
   (:mod:`semdup.cli.demo_review`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

__all__ = ["demo"]

DEMO_INDEX = "semdup-demo-travel"
LEARNED = "learned on the site"
TRAVEL_COLS = ("MAP", "MRR", "Acc@1", "Acc@5", "Acc@10")
SEMEVAL_COLS = ("MAP", "MRR", "P@1")
# the paper models are trained by their own commands (minutes to hours on CPU); the README rows hold the figures
PAPER_ROWS = (
    ("BOW-CNN", "Travel MAP 27.99 (semdup train --arch bow-cnn --data travel --threads 1); `--paper` reruns it here"),
    ("T-SCQA", "SemEval MAP 70.67 (python -m experiments.tscqa --checkpoint artifacts/scqa_rcnn/scqa-semeval ...)"),
    ("BOW-CNN", "AskUbuntu Acc 85.96 (semdup train --arch bow-cnn --data askubuntu --epochs 6)"),
)
PEER_NOTE = ("both base encoders (all-MiniLM-L6-v2, all-mpnet-base-v2) were trained by their authors on data that "
             "includes Stack Exchange duplicate pairs: every figure resting on them (default, peer) is flattered on "
             "these Stack Exchange sets")


def _ensure_opensearch() -> str:
    from semdup.cli.edge import settings

    if settings().opensearch is not None:  # a cluster of your own (SEMDUP_OPENSEARCH_URL or the config file)
        return settings().opensearch.url
    from semdup.devstack.local_opensearch import LocalOpenSearch, running_url

    url = running_url()
    if url:
        return url
    click.echo("Starting the embedded OpenSearch (first run: fetched from Maven Central and unpacked)...", err=True)
    return LocalOpenSearch().start()


def _ensure_broker() -> str:
    from semdup.cli.edge import settings

    if settings().broker is not None:
        return settings().broker.url
    from semdup.devstack.local_redis import LocalRedis, running_url

    return running_url() or LocalRedis().start()


def _semdup(*args: str, env: dict[str, str]) -> None:
    """Run one semdup step as its own process, as a user would; its progress goes to the terminal."""
    cmd = [sys.executable, "-m", "semdup", *args]
    click.echo(f"$ semdup {' '.join(args)}", err=True)
    proc = subprocess.run(cmd, env=env)
    if proc.returncode != 0:
        raise click.ClickException(f"step failed (exit {proc.returncode}): semdup {' '.join(args)}")


def _cells(metrics: dict[str, float] | None, cols: tuple[str, ...]) -> str:
    if metrics is None:
        return "".join(f"{'-':>9}" for _ in cols)
    return "".join(f"{metrics[c]:9.2f}" for c in cols)


@click.command("demo")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=Path("artifacts/demo"),
              show_default=True, help="Where bundles (and --paper's checkpoint) are built (reused when present).")
@click.option("--base-encoder", type=click.Choice(["minilm", "mpnet"]), default="minilm", show_default=True,
              help="The default's dense encoder (mpnet: the accurate preset, about 6x slower on CPU).")
@click.option("--skip-neural", is_flag=True, help="Only the lexical rows (no encoder, worker or reranker).")
@click.option("--paper", is_flag=True, help="Also train BOW-CNN on Travel (--threads 1) and rerank with it.")
@click.option("--learn", is_flag=True, help="Also run `semdup learn` on SemEval and AskUbuntu (their test sides "
              "never read) and add a 'learned on the site' row: the bundle each gate kept, tested once (about 25 "
              "minutes on 2 CPU cores).")
@click.option("--review", is_flag=True, help="Then serve a review page of Travel posts flagged by a real worker "
              "(threshold fitted on Travel's duplicate links), until Ctrl-C; prints its URL and a key.")
@click.option("--review-port", type=click.IntRange(1, 65535), default=8080, show_default=True,
              help="Port of the review page (another free one when it is taken).")
def demo(workdir: Path, base_encoder: str, skip_neural: bool, paper: bool, learn: bool, review: bool,
         review_port: int) -> None:
    """Start the embedded OpenSearch and Redis, build the default, index through Celery, rerank, print the table.

    \b
    Example:
      semdup demo                # or, on a fresh machine: bash scripts/demo.sh
      semdup demo --skip-neural  # lexical baselines only
      semdup demo --learn        # plus what `semdup learn` gets from SemEval's and AskUbuntu's training links
      semdup demo --review       # then a review page of flagged Travel duplicates at http://127.0.0.1:8080/review
    """
    from semdup.cli.edge import client as edge_client

    if review and (skip_neural or paper):
        raise click.UsageError("--review needs the neural default on the Travel index: drop --skip-neural and --paper")
    if learn and skip_neural:
        raise click.UsageError("--learn compares with the neural default: drop --skip-neural")
    t0 = time.perf_counter()
    url = _ensure_opensearch()
    client = edge_client(url)
    click.echo(f"OpenSearch: {url}", err=True)
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SEMDUP_OPENSEARCH_URL": url}
    sets = _load_sets()
    rows = _lexical_rows(client, sets)
    dev: dict[str, Any] = {}
    notes: list[str] = []
    if not skip_neural:
        env["SEMDUP_BROKER_URL"] = _ensure_broker()
        bundles = _build_defaults(workdir, base_encoder, env)
        _travel_rows(client, sets, bundles["travel"], env, rows, dev, notes)
        _semeval_rows(client, sets, bundles["semeval"], rows, dev)
        _pair_rows(client, sets, bundles["askubuntu"], rows, dev)
        if paper:
            _paper_travel(client, sets, workdir, env, rows)
        if learn:
            _learned_rows(client, sets, workdir, base_encoder, bundles, env, rows, notes)
    _print_table(rows, dev, notes, base_encoder, skip_neural, paper)
    (workdir / "demo-results.json").write_text(json.dumps({"test": rows, "dev": dev, "notes": notes}, indent=2))
    click.echo(f"\n{time.perf_counter() - t0:.0f} s in all; figures also in {workdir / 'demo-results.json'}. "
               "The embedded OpenSearch and Redis keep running: `semdup opensearch stop`, `semdup broker stop`.")
    if review:
        from semdup.cli.demo_review import review_step

        review_step(client, sets["travel"], bundles["travel"], DEMO_INDEX, workdir, env, review_port, _semdup)


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


def _build_defaults(workdir: Path, base_encoder: str, env: dict[str, str]) -> dict[str, Path]:
    """The base encoder's bundle (from its packages) and one fitted default per data set (reused when present)."""
    from semdup.data.paths import semeval_files

    base = workdir / base_encoder
    if not (base / "manifest.json").exists():
        _semdup("export", "--base-encoder", base_encoder, "--out", str(base), env=env)
    out = {}
    corpus = {"semeval": ["--corpus", str(semeval_files("test")[0])]}  # the unlabelled test input joins the IDF
    for data in ("travel", "semeval", "askubuntu"):
        bundle = workdir / f"default-{base_encoder}-{data}"
        if not (bundle / "manifest.json").exists():
            _semdup("fit-default", "--base-bundle", str(base), "--data", data, *corpus.get(data, []),
                    "--cache", str(workdir / "cache"), "--out", str(bundle), env=env)
        else:
            click.echo(f"Reusing the fitted default {bundle}", err=True)
        out[data] = bundle
    return out


def _index_with_worker(client, bundle: Path, env: dict[str, str]) -> bool:
    """A real Celery worker process indexes all Travel posts through Redis; returns whether k-NN is on."""
    from semdup.core.clients import knn_available
    from semdup.data.paths import travel_dir

    client.indices.delete(index=DEMO_INDEX, ignore_unavailable=True)
    click.echo(f"$ semdup worker --bundle {bundle}   (in the background)", err=True)
    worker = subprocess.Popen([sys.executable, "-m", "semdup", "worker", "--bundle", str(bundle), "-c", "1",
                               "--loglevel", "WARNING"], env=env, start_new_session=True)
    knn = knn_available(client)
    try:
        _semdup("index-posts", "--input", str(travel_dir()), "--index", DEMO_INDEX, "--bundle", str(bundle),
                "--sparse", *(["--knn"] if knn else []), env=env)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
    return knn


def _travel_rows(client, sets, bundle_path: Path, env, rows, dev, notes) -> None:
    from semdup.bundle import Bundle
    from semdup.evaluation.through_reranker import DENSE_ALONE, candidate_recall, rank_queries
    from semdup.measures.ranking import retrieval_scores

    knn = _index_with_worker(client, bundle_path, env)
    bundle = Bundle.load(bundle_path)
    fusions = {"default": None, "peer": DENSE_ALONE}
    for split in ("dev", "test"):
        queries = sets["travel"].queries(split)
        t0 = time.perf_counter()
        ranked = rank_queries(client, bundle, DEMO_INDEX, queries, fusions, 100, knn=knn)
        ms = (time.perf_counter() - t0) * 1000 / max(2 * len(queries), 1)
        click.echo(f"Travel {split}: {len(queries)} queries, {ms:.0f} ms per query through the reranker", err=True)
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
                  notes) -> None:
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
            _semdup("learn", "--data", data, "--base-encoder", base_encoder, "--base-bundle",
                    str(workdir / base_encoder), "--out", str(out), env=env)
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


def _paper_travel(client, sets, workdir: Path, env, rows) -> None:
    """BOW-CNN trained on Travel here (one thread: bit-reproducible), indexed by the worker, BM25 top 100 reranked."""
    from semdup.bundle import Bundle
    from semdup.evaluation.through_reranker import rank_queries
    from semdup.measures.ranking import retrieval_scores

    ckpt, bundle = workdir / "bow-cnn-travel", workdir / "bow-cnn-travel.bundle"
    if not (ckpt / "metrics.json").exists():
        _semdup("train", "--arch", "bow-cnn", "--data", "travel", "--threads", "1", "--out", str(ckpt), env=env)
    if not (bundle / "manifest.json").exists():
        _semdup("export", "--checkpoint", str(ckpt), "--out", str(bundle), env=env)
    _index_with_worker(client, bundle, env)
    queries = sets["travel"].queries("test")
    run = rank_queries(client, Bundle.load(bundle), DEMO_INDEX, queries, {"bow-cnn": None}, 100)["bow-cnn"]
    relevant = {q.post.id: set(q.relevant) for q in queries}
    rows["bow-cnn (paper, trained here)"] = {"travel": retrieval_scores(
        {q: [d for d, _ in hits] for q, hits in run.items()}, relevant, cutoff=100)}


def _print_table(rows, dev, notes, base_encoder: str, skip_neural: bool, paper: bool) -> None:
    labels = {"default": f"default (hybrid {base_encoder})", "peer": f"{base_encoder} alone (peer)"}
    head = ([f"T:{c}" for c in TRAVEL_COLS] + [f"S:{c}" for c in SEMEVAL_COLS] + ["A:Acc"])
    click.echo("\nTest figures: T = Travel Stack Exchange test (231 queries, all 4,919 posts; Acc@k, MAP, MRR over "
               "the top 100), S = SemEval-2016 test (70 questions x 10 candidates, official MAP/MRR/P@1), "
               "A = AskUbuntu pairs (285 test pairs, threshold chosen on the 715 train pairs)")
    click.echo(f"{'method':<30}" + "".join(f"{h:>9}" for h in head))
    first = ("default", LEARNED, "peer")
    order = [n for n in first if n in rows] + [n for n in rows if n not in first]
    for name in order:
        r = rows[name]
        click.echo(f"{labels.get(name, name):<30}" + _cells(r.get("travel"), TRAVEL_COLS)
                   + _cells(r.get("semeval"), SEMEVAL_COLS) + _cells(r.get("askubuntu"), ("Acc",)))
    if not skip_neural:
        click.echo("\nDev (every choice made here; AskUbuntu: train pairs) for the default and the peer:")
        for name in ("default", "peer"):
            r = dev.get(name, {})
            click.echo(f"{labels[name]:<30}" + _cells(r.get("travel"), TRAVEL_COLS)
                       + _cells(r.get("semeval"), SEMEVAL_COLS) + _cells(r.get("askubuntu"), ("Acc",)))
        click.echo(f"\nNote: {PEER_NOTE}.")
    for note in notes:
        click.echo(note)
    click.echo("Paper models (not rerun by this demo" + (", except BOW-CNN on Travel above" if paper else "")
               + "; figures and commands in the README):")
    for name, where in PAPER_ROWS:
        click.echo(f"  {name}: {where}")
