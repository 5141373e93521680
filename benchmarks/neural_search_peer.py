"""semdup beside OpenSearch's own neural search with the same encoder, measured in one run (a benchmark, not a test).

    python -m benchmarks.neural_search_peer [--bundle B] [--json]

The peer an operator would pick instead of semdup: OpenSearch 2.19.1 with ml-commons + neural-search 2.19.1.0
(Maven Central) running all-MiniLM-L6-v2 inside the cluster as a local ONNX model (:mod:`semdup.devstack.ml_plugins`,
:mod:`.peer_model`). semdup runs its default bundle (MiniLM + corpus IDF + BM25 + title term, ``semdup
fit-default``; built under the semdup cache when ``--bundle`` is not given, about 5 minutes) on a second node.
Both nodes run the same install (with ml-commons: semdup's pipeline needs it), are started here, each with its own
state folder, port and 1 GiB heap, and stopped at the end.

Measured, the two systems' calls alternating (batch by batch, query by query, the order rotating):

* ingest posts/s over ``--posts`` Travel posts (a seeded sample): the peer bulk-indexes ``--bulk`` posts per
  request through its ``text_embedding`` ingest pipeline (the embedding runs in the node: DJL + onnxruntime
  1.16, its default threads); semdup runs ``index_batch`` (the Celery worker's function) on the same batches,
  the bundle loaded as a worker process loads it on ``--threads`` cores (that many encoder streams of one
  onnxruntime thread each) in this process, the bulk writes to its node overlapped. Beside wall time: this
  process's CPU seconds and each node's (``/proc``), per post;
* query latency over ``--queries`` Travel test queries × ``--rounds``: the peer's hybrid query (BM25 on the text
  ∪ neural k-NN k=100, min-max, arithmetic mean 0.3 / 0.7, ``pagination_depth`` 100, top 10) vs semdup's
  default reranker call in-process (``Reranker.rank``: BM25 ∪ k-NN candidates, 100 each, fusion, top 10; what
  ``semdup serve`` runs per request, without the HTTP hop; ``--query-threads`` onnxruntime threads, 2 as the
  service's default) and its fast preset (k-NN off); with ``--with-one-thread``, the default call with a 1-thread
  query encoder too (the thread policy's baseline, same run);
* the site's own ``_search`` through semdup's search pipeline (``semdup pipeline create``: the ml_inference
  request processor calls a real ``semdup serve`` of the index, which answers the one-hop query the node then
  runs, :mod:`semdup.reranker.onehop`; the report's setup names the mode): the body a site sends for a new
  question (``match`` on its title and on its body), top 10;
* query encoding alone: the peer's ``_predict/text_embedding`` of one text vs semdup's query encoding
  (``Bundle.encode_query`` and, for a bundle with a title term, the title's vector, as ``rank`` does);
* quality on every Travel test query (the official Travel measures over the top 100, the query post left out):
  the peer's hybrid ``_search``, semdup's ``/v1/rerank`` (the served index, over HTTP) and the site's ``_search``
  through semdup's pipeline (``--no-quality`` skips it);
* that the two embed alike: the cosine of their vectors of the same 10 posts.

The text both encode is semdup's: title and body cleaned by the shared text pipeline, joined by a space
(:func:`semdup.core.wordpiece.wordpiece_text`), cut at 256 wordpieces; the peer's BM25 half matches that text
with the query text semdup's BM25 template uses. Queries are searched against all 4,919 Travel posts (the ingest
sample plus the rest, indexed untimed) unless ``--query-corpus ingested``. The load average is printed with
every phase. A run whose 1-minute load average at the start is above 1 stops before it starts (other work would
share the cores and the ratios would describe that), unless ``--allow-load``: its report is then labelled as a
loaded run. ``docs/benchmarks.md`` says how to get a quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks.bench_stack import serve_process
from benchmarks.indexing import _hardware, _versions
from benchmarks.peer_report import build_report, format_report, ingest_side, quiet_enough
from benchmarks.report import elapsed_ms
from semdup.core.errors import SemdupError
from semdup.core.posts import Post

logger = logging.getLogger(__name__)

_PEER_INDEX = "peer-travel"
_SEMDUP_INDEX = "semdup-travel"
_INGEST_PIPELINE = "semdup-peer-embed"
_SEARCH_PIPELINE = "semdup-peer-hybrid"
_SEMDUP_PIPELINE = "semdup-bench-pipeline"
_TIMEOUT = 120
_TOP = 100  # the quality runs rank the top 100 (the Travel protocol's cutoff)


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far, from /proc (0 where /proc is absent)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def default_bundle(workdir: Path) -> Path:
    """The default bundle (MiniLM fitted on Travel dev), built once under ``workdir`` as ``semdup demo`` builds it:
    ``semdup export --base-encoder minilm`` then ``semdup fit-default --data travel``."""
    from semdup.export.base_encoder_bundle import export_base_encoder
    from semdup.learn.default_bundle import fit_default

    base, out = workdir / "minilm", workdir / "default-minilm-travel"
    if not (out / "manifest.json").exists():
        if not (base / "manifest.json").exists():
            logger.warning("exporting the MiniLM bundle to %s", base)
            export_base_encoder("minilm", base)
        logger.warning("fitting the default bundle on Travel dev into %s (about 5 minutes)", out)
        fit_default(base, "travel", out, cache_dir=workdir / "cache")
    return out


class _Nodes:
    """The two nodes: semdup's (the devstack install) and the peer's (with the ML plugins), in ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        from semdup.devstack.local_opensearch import LocalOpenSearch
        from semdup.devstack.local_process import any_free_port
        from semdup.devstack.ml_plugins import ensure_ml_installed, ml_cache_dir

        ensure_ml_installed()
        self.semdup = LocalOpenSearch(cache_dir=ml_cache_dir(), state_dir=workdir / "semdup-node", port=any_free_port())
        self.peer = LocalOpenSearch(cache_dir=ml_cache_dir(), state_dir=workdir / "peer-node", port=any_free_port())

    def start(self) -> tuple[Any, Any]:
        from semdup.core.settings import OpenSearchSettings
        from semdup.opensearch_io.clients import connect

        clients = []
        for node in (self.semdup, self.peer):
            url = node.start()
            clients.append(connect(OpenSearchSettings(url=url, timeout=_TIMEOUT)))
        from semdup.opensearch_io.boundary import site_searches

        # the peer's index runs its hybrid normalization as its default search pipeline, as the peer's application
        # searches it; semdup's own clients would name no pipeline (issue #45)
        return clients[0], site_searches(clients[1])

    def pids(self) -> tuple[int, int]:
        from semdup.devstack.local_process import read_record

        return tuple(read_record(n.state_file).pid for n in (self.semdup, self.peer))  # type: ignore[return-value]

    def stop(self) -> None:
        for node in (self.semdup, self.peer):
            try:
                node.stop()
            except Exception:  # noqa: BLE001 - stop the other one whatever this one says
                logger.exception("could not stop %s", node)


def _peer_setup(client: Any, bundle: Any) -> str:
    """Export, serve, register and deploy the peer's MiniLM; create its pipelines and index. Its model id."""
    from benchmarks import peer_model as pm
    from semdup.index_format.schema import HNSW_PARAMETERS

    max_len = int(bundle.manifest["tokenizer"]["max_len"])
    onnx_model, tokenizer_json, dim = pm.export_peer_onnx(bundle.manifest["base_encoder"]["name"])
    data = pm.model_zip(onnx_model, pm.peer_tokenizer_json(tokenizer_json, max_len))
    with pm.ZipServer(data) as server:
        model_id = pm.register_and_deploy(client, server.url, pm.sha256_hex(data), len(data), dim, max_len)
    client.ingest.put_pipeline(id=_INGEST_PIPELINE, body=pm.ingest_pipeline(model_id))
    client.transport.perform_request("PUT", f"/_search/pipeline/{_SEARCH_PIPELINE}", body=pm.hybrid_pipeline())
    client.indices.create(index=_PEER_INDEX,
                          body=pm.peer_index_body(dim, _INGEST_PIPELINE, _SEARCH_PIPELINE, HNSW_PARAMETERS))
    return model_id


def _peer_bulk(client: Any, posts: Sequence[Post], settings: Any) -> None:
    from semdup.core.wordpiece import wordpiece_text

    body: list[dict[str, Any]] = []
    for p in posts:
        body += [{"index": {"_index": _PEER_INDEX, "_id": p.id}},
                 {"title": p.title, "body": p.body, "text": wordpiece_text(p, settings)}]
    resp = client.bulk(body=body, request_timeout=_TIMEOUT)
    if resp.get("errors"):
        bad = [i for i in resp["items"] if i["index"].get("error")]
        raise RuntimeError(f"the peer refused {len(bad)} of {len(posts)} posts: {str(bad[0])[:300]}")


def _worker_bundle(bundle_cls: Any, path: str | Path, threads: int) -> Any:
    """The bundle as a CPU worker process runs it (:func:`semdup.apps.worker.load_worker_bundle`): ``threads``
    encoder streams of one onnxruntime thread each (SEMDUP_ENCODE_THREADS)."""
    return bundle_cls.load(path, device="cpu", intra_op_threads=1, streams=threads)


def _semdup_batch(client: Any, posts: Sequence[Post], bundle: Any, search: Any) -> None:
    from semdup.indexer.batch_writer import index_batch

    result = index_batch(client, _SEMDUP_INDEX, [p.to_json() for p in posts], bundle, search=search)
    if result.failed:
        raise RuntimeError(f"semdup failed {len(result.failed)} posts: {result.failed[:3]}")


_worker: tuple[Any, Any, Any] | None = None  # (client, bundle, search fields) of a --workers child process


def _worker_init(bundle_path: str, threads: int, url: str) -> None:
    """A child process of ``--workers``: its own bundle session (``threads`` intra-op threads) and client, as
    each Celery worker process has."""
    global _worker
    from semdup.bundle.bundle import Bundle
    from semdup.core.settings import OpenSearchSettings
    from semdup.index_format.mapping import candidate_fields
    from semdup.opensearch_io.clients import connect

    client = connect(OpenSearchSettings(url=url, timeout=_TIMEOUT))
    bundle = _worker_bundle(Bundle, bundle_path, threads)
    _worker = (client, bundle, candidate_fields(client, _SEMDUP_INDEX))


def _worker_batch(payloads: list[dict[str, Any]]) -> float:
    """``index_batch`` of one slice in a child; its CPU seconds."""
    assert _worker is not None
    client, bundle, search = _worker
    c0 = time.process_time()
    _semdup_batch(client, [Post.from_json(p) for p in payloads], bundle, search)
    return time.process_time() - c0


class _WorkerPool:
    """``n`` child processes that each take an equal slice of a batch at once (``n`` Celery workers, one task each);
    ``client_cpu`` adds up their CPU seconds."""

    def __init__(self, n: int, bundle_path: str, threads: int, url: str) -> None:
        import multiprocessing

        self.n = n
        self.client_cpu = 0.0
        self._pool = multiprocessing.get_context("spawn").Pool(n, _worker_init, (bundle_path, threads, url))

    def __call__(self, posts: Sequence[Post]) -> None:
        size = -(-len(posts) // self.n)
        slices = [[p.to_json() for p in posts[i : i + size]] for i in range(0, len(posts), size)]
        self.client_cpu += sum(self._pool.map(_worker_batch, slices))

    def close(self) -> None:
        self._pool.close()
        self._pool.join()



def site_search(post: Post, size: int) -> dict[str, Any]:
    """The search a site sends for a new question: its title and body matched against the index's, the post itself
    left out (what semdup's pipeline ranks, :func:`semdup.reranker.rewrite.post_of_search`)."""
    return {"size": size, "_source": False, "query": {"bool": {
        "should": [{"match": {"title": post.title}}, {"match": {"body": post.body}}],
        "must_not": [{"ids": {"values": [post.id]}}]}}}


def _rotating(calls: dict[str, Callable[[], Any]], turn: int) -> list[tuple[str, Callable[[], Any]]]:
    names = list(calls)
    k = turn % len(names)
    return [(n, calls[n]) for n in names[k:] + names[:k]]


def _sample(corpus: Sequence[Post], n: int, seed: int) -> tuple[list[Post], list[Post]]:
    """``n`` posts of the corpus in a seeded random order, and the rest (in corpus order)."""
    order = np.random.default_rng(seed).permutation(len(corpus))
    picked = [corpus[int(i)] for i in order[:n]]
    chosen = {p.id for p in picked}
    return picked, [p for p in corpus if p.id not in chosen]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", default=None, help="semdup's bundle (default: the MiniLM default fitted on Travel, "
                    "built once under <semdup cache>/neural-peer/bundles)")
    ap.add_argument("--posts", type=int, default=1000, help="Travel posts whose ingest is timed")
    ap.add_argument("--bulk", type=int, default=100, help="posts per bulk request / index_batch call")
    ap.add_argument("--threads", type=int, default=2, help="cores semdup's worker encodes on (per worker process): "
                    "that many encoder streams of one onnxruntime thread each, as `semdup worker` runs")
    ap.add_argument("--query-threads", type=int, default=2, help="onnxruntime threads of semdup's query encoding "
                    "(default 2: what `semdup serve` runs each request with, SEMDUP_ONNX_THREADS)")
    ap.add_argument("--workers", type=int, default=1, help="semdup's ingest in this many processes, each taking an "
                    "equal slice of every batch at once (1: in this process)")
    ap.add_argument("--queries", type=int, default=100, help="Travel test queries")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--with-one-thread", action="store_true",
                    help="also time the default call with its query encoded on 1 onnxruntime thread")
    ap.add_argument("--allow-load", action="store_true",
                    help="run even when the 1-minute load average at the start is above 1 (the report is then "
                         "labelled as a loaded run; without this flag such a run stops before it starts)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed calls of each system before the query timing")
    ap.add_argument("--query-corpus", choices=("all", "ingested"), default="all",
                    help="search all Travel posts (the rest indexed untimed) or only the ingested sample")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=None, help="state folders of the two nodes (default: a temporary folder)")
    ap.add_argument("--no-quality", action="store_true", help="skip the Travel test quality runs")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the text report")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("opensearch").setLevel(logging.ERROR)  # the reranker's template look-ups answer 404 first
    from semdup.bundle.bundle import Bundle
    from semdup.data.paths import travel_dir
    from semdup.data.stackexchange import load_stackexchange_dump
    from semdup.devstack.ml_plugins import ml_cache_dir
    from semdup.indexer.batch_writer import ensure_index_model
    from semdup.ingest.lexical_index import create_index
    from semdup.measures.ranking import retrieval_scores
    from semdup.reranker import Reranker, RerankerSettings
    from semdup.search_pipeline import PipelineSpec
    from semdup.search_pipeline import create as create_pipeline
    from semdup.search_templates import query_text

    loads = {"start": _load()}
    refused = quiet_enough(loads["start"], args.allow_load)
    if refused:
        raise SemdupError(refused)
    bundle_path = Path(args.bundle) if args.bundle else default_bundle(ml_cache_dir() / "bundles")
    bundle = _worker_bundle(Bundle, bundle_path, args.threads)
    if bundle.input_kind != "wordpiece" or not bundle.manifest.get("base_encoder"):
        raise SystemExit(f"{bundle_path} is not a base-encoder (MiniLM) bundle; the peer runs the same encoder")
    dump = load_stackexchange_dump(travel_dir())
    ingest_posts, rest = _sample(dump.corpus(), args.posts, args.seed)
    queries = [q.post for q in dump.queries("test")][: args.queries]
    settings = bundle.pipeline.settings
    own_tmp = args.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="semdup-peer-bench-")) if own_tmp else Path(args.workdir)
    if own_tmp:
        workdir.chmod(0o711)  # the nodes run as an unprivileged account when we are root: let it enter
    nodes = _Nodes(workdir)
    pool: _WorkerPool | None = None
    stack = contextlib.ExitStack()
    try:
        s_client, p_client = nodes.start()
        s_pid, p_pid = nodes.pids()
        model_id = _peer_setup(p_client, bundle)
        create_index(s_client, _SEMDUP_INDEX, dimension=bundle.dimension, knn=True, recreate=True)
        search = ensure_index_model(s_client, _SEMDUP_INDEX, bundle.version)
        loads["setup"] = _load()

        # --- the embeddings agree -------------------------------------------------------------------
        from benchmarks.peer_model import predict_body
        from semdup.core.wordpiece import wordpiece_text

        def peer_embed(texts: list[str]) -> np.ndarray:
            resp = p_client.transport.perform_request(
                "POST", f"/_plugins/_ml/_predict/text_embedding/{model_id}", body=predict_body(texts),
                params={"request_timeout": _TIMEOUT})
            return np.asarray([r["output"][0]["data"] for r in resp["inference_results"]], dtype=np.float64)

        check = ingest_posts[:10]
        ours = bundle.encode_dense(check).astype(np.float64)
        theirs = peer_embed([wordpiece_text(p, settings) for p in check])
        cosines = (np.sum(ours * theirs, axis=1) / np.linalg.norm(theirs, axis=1)).tolist()

        # --- ingest, batch by batch, the order alternating ------------------------------------------
        if args.workers > 1:
            pool = _WorkerPool(args.workers, str(bundle_path), args.threads, nodes.semdup.url)
        calls = {"peer": lambda b: _peer_bulk(p_client, b, settings),
                 "semdup": pool or (lambda b: _semdup_batch(s_client, b, bundle, search))}
        wall = dict.fromkeys(calls, 0.0)
        client_cpu = dict.fromkeys(calls, 0.0)
        node_cpu = dict.fromkeys(calls, 0.0)
        pid_of = {"peer": p_pid, "semdup": s_pid}
        for turn, start in enumerate(range(0, len(ingest_posts), args.bulk)):
            batch = ingest_posts[start : start + args.bulk]
            for name, fn in _rotating(calls, turn):  # type: ignore[arg-type]
                n0, c0, t0 = _proc_cpu(pid_of[name]), time.process_time(), time.perf_counter()
                fn(batch)
                wall[name] += time.perf_counter() - t0
                client_cpu[name] += time.process_time() - c0
                node_cpu[name] += _proc_cpu(pid_of[name]) - n0
        if pool is not None:
            client_cpu["semdup"] += pool.client_cpu
        ingest = {n: ingest_side(len(ingest_posts), wall[n], client_cpu[n], node_cpu[n]) for n in calls}
        loads["ingest"] = _load()
        if args.query_corpus == "all":
            for start in range(0, len(rest), args.bulk):
                for fn in calls.values():
                    fn(rest[start : start + args.bulk])
        if pool is not None:
            pool.close()
            pool = None
        for client, index in ((p_client, _PEER_INDEX), (s_client, _SEMDUP_INDEX)):
            client.indices.refresh(index=index, request_timeout=_TIMEOUT)
        indexed = {"peer": p_client.count(index=_PEER_INDEX)["count"],
                   "semdup": s_client.count(index=_SEMDUP_INDEX)["count"]}

        # --- queries ----------------------------------------------------------------------------------
        from benchmarks.peer_model import hybrid_query

        q_bundle = Bundle.load(bundle_path, providers=["CPUExecutionProvider"], intra_op_threads=args.query_threads)
        rr = Reranker(q_bundle, s_client, _SEMDUP_INDEX, RerankerSettings(k_candidates=100, search_timeout=30))
        rr_fast = rr.with_settings(knn=False)

        def peer_query(post: Post) -> Any:
            body = hybrid_query(query_text(post.title, post.body), wordpiece_text(post, settings), model_id)
            return p_client.search(index=_PEER_INDEX, body=body, request_timeout=_TIMEOUT)

        def semdup_encode(post: Post) -> Any:
            return rr.encoder.encode_post(post)  # the body, then the title (a bundle with a title term), as rank

        # the service semdup's pipeline calls: a real `semdup serve` of the index, its queries on the same threads
        serve_env = {**os.environ, "SEMDUP_ONNX_THREADS": str(args.query_threads), "SEMDUP_OPS_AUTH": "0"}
        base, key = stack.enter_context(serve_process(str(bundle_path), _SEMDUP_INDEX, nodes.semdup.url, serve_env,
                                                      workdir / "serve.log"))  # fmt: skip
        spec = PipelineSpec(index=_SEMDUP_INDEX, service_url=base, timeout=10, name=_SEMDUP_PIPELINE)
        create_pipeline(s_client, spec, key)
        http = stack.enter_context(httpx.Client(base_url=base, headers={"X-API-Key": key}, timeout=_TIMEOUT))
        mode = http.post("/v1/search/rewrite", json={"index": _SEMDUP_INDEX, "search": site_search(queries[0], 10)}
                         ).json().get("mode", "candidates")  # how the service answers the pipeline: one-hop here

        def semdup_pipeline(post: Post, size: int = 10) -> Any:
            return s_client.search(index=_SEMDUP_INDEX, body=site_search(post, size),
                                   params={"search_pipeline": _SEMDUP_PIPELINE, "request_timeout": _TIMEOUT})

        query_calls = {"peer": peer_query, "semdup": lambda p: rr.rank(p, k=10),
                       "semdup_fast": lambda p: rr_fast.rank(p, k=10), "semdup_pipeline": semdup_pipeline}
        if args.with_one_thread:  # the default with a 1-thread query encoder: the thread policy's same-run baseline
            b1 = Bundle.load(bundle_path, providers=["CPUExecutionProvider"], intra_op_threads=1)
            rr_1 = Reranker(b1, s_client, _SEMDUP_INDEX, RerankerSettings(k_candidates=100, search_timeout=30))
            query_calls["semdup_one_thread"] = lambda p: rr_1.rank(p, k=10)
        encode_calls = {"peer": lambda p: peer_embed([wordpiece_text(p, settings)]), "semdup": semdup_encode}
        for post in queries[: args.warmup]:
            for fn in (*query_calls.values(), *encode_calls.values()):
                fn(post)
        query_ms: dict[str, list[float]] = {n: [] for n in query_calls}
        encode_ms: dict[str, list[float]] = {n: [] for n in encode_calls}
        turn = 0
        for _ in range(args.rounds):
            for post in queries:
                for name, fn in _rotating(query_calls, turn):
                    query_ms[name].append(elapsed_ms(lambda fn=fn: fn(post)))
                for name, fn in _rotating(encode_calls, turn):
                    encode_ms[name].append(elapsed_ms(lambda fn=fn: fn(post)))
                turn += 1
        loads["queries"] = _load()

        # --- quality: every Travel test query, the top 100 ------------------------------------------------------
        quality: dict[str, dict[str, float]] = {}
        if not args.no_quality:
            tests = dump.queries("test")
            relevant = {q.post.id: set(q.relevant) for q in tests}
            ways = {
                "peer hybrid _search": lambda p: [h["_id"] for h in p_client.search(
                    index=_PEER_INDEX, body=hybrid_query(query_text(p.title, p.body), wordpiece_text(p, settings),
                                                         model_id, size=_TOP), request_timeout=_TIMEOUT)["hits"]["hits"]],
                "semdup /v1/rerank": lambda p: [c["id"] for c in http.post("/v1/rerank", json={
                    "title": p.title, "body": p.body, "k": _TOP, "exclude_id": p.id}).json()["candidates"]],
                "site _search + semdup pipeline": lambda p: [h["_id"] for h in semdup_pipeline(p, _TOP)["hits"]["hits"]],
            }
            for name, fn in ways.items():
                run = {q.post.id: fn(q.post) for q in tests}
                quality[name] = retrieval_scores(run, relevant, cutoff=_TOP)
        loads["end"] = _load()
    finally:
        stack.close()
        if pool is not None:
            pool.close()
        nodes.stop()
        if own_tmp:
            shutil.rmtree(workdir, ignore_errors=True)

    module = __spec__.name if __spec__ else "benchmarks.neural_search_peer"
    meta = {
        "command": shlex.join(["python", "-m", module, *(argv if argv is not None else sys.argv[1:])]),
        "hardware": _hardware(),
        "versions": f"{_versions()}; OpenSearch 2.19.1 + ml-commons/neural-search 2.19.1.0 (both nodes)",
        "setup": (f"bundle {bundle.version}; {len(ingest_posts)} Travel posts ingested (seed {args.seed}), bulk "
                  f"{args.bulk}; semdup {args.workers} worker process(es) x {args.threads} encoder streams, queries "
                  f"{args.query_threads} onnx thread(s); peer model "
                  f"{model_id} (ONNX, DJL default threads); indexed peer {indexed['peer']} / semdup "
                  f"{indexed['semdup']}; {len(queries)} test queries x {args.rounds} rounds, calls alternating; "
                  f"the pipeline's rewrite: {mode}"),
        "load_average": loads,
    }
    report = build_report(meta, ingest, query_ms, encode_ms, cosines, quality)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


if __name__ == "__main__":
    from benchmarks import run_main

    run_main(main)
