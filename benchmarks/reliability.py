"""The fault runs of issues #13 and #17, replayed: real Travel posts through a real worker, on Redis and on
RabbitMQ, with faults injected; nothing lost.

For each broker (``--broker``, both by default) each scenario sends ``--posts`` Travel posts (default 1,000) as one
index job in batches of ``--batch-size`` (default 50) into a fresh index, through the real parts
(:mod:`benchmarks.reliability_stack`): a ``semdup worker`` subprocess, a throwaway broker of that
kind (persistent as in production), and the OpenSearch of ``$SEMDUP_OPENSEARCH_URL`` reached by the worker, and
by the wait, only through a TCP proxy the script cuts. The job is waited on as ``semdup index-posts`` waits (its
outcomes, with the sweeper on: ``--sweep-after``), while the fault runs beside it. Scenarios:

* ``no fault``: the reference row;
* ``worker SIGKILL``: the whole worker (main process and pool) is SIGKILLed mid-job, then a new one started;
* ``broker stopped``: the broker is stopped for ``--broker-down`` seconds (60), then started again;
* ``OpenSearch cut``: the worker's and the wait's path to OpenSearch is cut for ``--opensearch-down`` seconds
  (360, longer than the ``--budget`` retry budget, so batches cannot park either), then restored;
* ``bad id``: one post of one batch has a 600-byte id (OpenSearch refuses an ``_id`` over 512 bytes);
* ``write-blocked``: the index has ``index.blocks.write`` set for the whole job.

Each scenario waits until its job is finished (by its tasks' outcomes) or ``--settle`` seconds past its fault,
then counts every sent post from the sources themselves: **written** (in the index with the bundle's model),
**parked** (in ``semdup-parked``), **queued** (in a task message on the broker: Redis's queue or ``unacked``;
RabbitMQ cannot be read, so there its census is only final), and **lost**: none of those. Lost must read 0
everywhere (the script exits 1 otherwise). The job's own counts are printed beside them, the census taken
during the worker kill and the OpenSearch cut, and what the wait said while the fault lasted (a line when it
changes and every minute).

Example (the full run takes about 25 minutes; ``--opensearch-down 60 --broker-down 15`` for a quick one)::

    export SEMDUP_OPENSEARCH_URL=$(semdup opensearch start)
    python -m benchmarks.reliability --bundle artifacts/bundles/bow-cnn-travel
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.reliability_stack import BROKERS, Census, Stack, StatusLog, wait_until
from semdup.core.posts import Post

logger = logging.getLogger(__name__)

_SCENARIOS = ("no fault", "worker SIGKILL", "broker stopped", "OpenSearch cut", "bad id", "write-blocked")
_FAULTS = ("worker SIGKILL", "broker stopped", "OpenSearch cut")  # injected by a thread while the job is waited on


@dataclass
class Row:
    broker: str
    scenario: str
    census: Census
    job: str  # the job's own counts: written/parked of total
    seconds: float
    during: Census | None = None
    note: str = ""
    said: list[str] = field(default_factory=list)


def _fault(stack: Stack, scenario: str, job: Any, index: str, sent: set[str], out: dict[str, Any]) -> None:
    """Inject ``scenario``'s fault once a fifth of the job is written (run in a thread beside the wait)."""
    from semdup.ingest.backlog import queued_tasks

    args = stack.args
    share = len(sent) // 5
    try:
        wait_until(lambda: stack.written(job) >= share, "posts before the fault", 300)
        if scenario == "worker SIGKILL":
            stack.worker.kill()
            held = [t for t in queued_tasks(stack.app) or [] if t.unacked and t.job == job.id]
            out["note"] = (
                f"killed holding {sum(len(t.post_ids()) for t in held)} posts unacknowledged"
                if stack.kind == "redis"
                else "killed mid-job; RabbitMQ requeued what it held when its connection closed"
            )
            out["during"] = stack.census(index, sent, final=False)
            stack.worker.start()
        elif scenario == "broker stopped":
            stack.stop_broker()
            time.sleep(args.broker_down)
            stack.start_broker()
            out["note"] = f"{stack.name} down {args.broker_down:.0f} s"
        elif scenario == "OpenSearch cut":
            stack.proxy.down()
            time.sleep(max(0.0, args.opensearch_down - 5))
            out["during"] = stack.census(index, sent, final=False)
            time.sleep(min(5.0, args.opensearch_down))
            stack.proxy.up()
            out["note"] = f"cut {args.opensearch_down:.0f} s (retry budget {args.budget:.0f} s)"
    except BaseException as exc:  # the main thread re-raises it
        out["error"] = exc


def run_scenario(stack: Stack, scenario: str, posts: list[Post]) -> Row:
    """One scenario on a fresh index: enqueue, inject the fault while waiting, let it settle, count."""
    from semdup.ingest.jobs import enqueue_posts, wait_for

    args = stack.args
    index = stack.fresh_index(scenario)
    if scenario == "bad id":
        bad = posts[len(posts) // 3]
        posts = [*posts]
        posts[len(posts) // 3] = Post("x" * 600, bad.title, bad.body)
    sent = {p.id for p in posts}
    if scenario == "write-blocked":
        stack.client.indices.put_settings(index=index, body={"index.blocks.write": True})
    if not stack.worker.running:
        stack.worker.start()
    t0 = time.monotonic()
    job = enqueue_posts(stack.client, index, posts, stack.bundle.version, batch_size=args.batch_size, progress=False)
    out: dict[str, Any] = {}
    fault = threading.Thread(target=_fault, args=(stack, scenario, job, index, sent, out), daemon=True)
    if scenario in _FAULTS:
        fault.start()
    said = StatusLog()
    longest = {"broker stopped": args.broker_down, "OpenSearch cut": args.opensearch_down}.get(scenario, 0.0)
    done = wait_for(
        stack.waiter,
        job,
        timeout=args.settle + longest,
        interval=0.5,
        progress=False,
        sweep_after=args.sweep_after,
        on_progress=said,
    )
    if fault.is_alive() or scenario in _FAULTS:
        fault.join()
    if "error" in out:
        raise out["error"]
    seconds = time.monotonic() - t0
    if scenario == "write-blocked":
        stack.client.indices.put_settings(index=index, body={"index.blocks.write": False})
    census = stack.census(index, sent, final=True)
    counts = f"{done.written}/{done.parked} of {done.total}" + ("" if done.finished else " (not finished)")
    if done.waiting.resent_batches:
        out["note"] = f"{out.get('note', '')}; the sweeper sent {done.waiting.resent_batches} batches again".strip(
            "; "
        )
    return Row(stack.name, scenario, census, counts, seconds, out.get("during"), out.get("note", ""), said.lines)


def _print(rows: list[Row]) -> None:
    head = f"{'broker':<9}{'scenario':<16}{'sent':>6}{'written':>9}{'parked':>8}{'queued':>8}{'lost':>6}"
    print(f"{head}   job's own count   settled   during the fault (sent written parked queued lost)")
    for r in rows:
        during = r.during.cells() if r.during else ""
        print(
            f"{r.broker:<9}{r.scenario:<16}{r.census.cells()}   {r.job:<17} {r.seconds:6.1f} s {during:<38}  {r.note}"
        )
    for r in rows:
        if r.said:
            print(f"what the wait said ({r.broker}, {r.scenario}):")
            for line in r.said:
                print(f"  {line}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--bundle", required=True, help="model bundle directory or .tar.gz")
    parser.add_argument("--data", default=None, help="Stack Exchange dump folder (default: the Travel dump)")
    parser.add_argument("--posts", type=int, default=1000, help="posts per scenario (the first N of the dump)")
    parser.add_argument("--batch-size", type=int, default=50, help="posts per task")
    parser.add_argument("--broker", action="append", choices=BROKERS, help="run on these brokers (default: both)")
    parser.add_argument("--budget", type=float, default=20.0, help="the worker's retry budget, seconds")
    parser.add_argument(
        "--visibility-timeout", type=int, default=60, help="seconds before a dead worker's batch is handed out again"
    )
    parser.add_argument("--sweep-after", type=float, default=60.0, help="the sweeper's bound, seconds")
    parser.add_argument(
        "--broker-down", "--redis-down", type=float, default=60.0, help="seconds the broker is stopped"
    )
    parser.add_argument("--opensearch-down", type=float, default=360.0, help="seconds OpenSearch is cut")
    parser.add_argument("--settle", type=float, default=600.0, help="seconds a scenario may take past its fault")
    parser.add_argument("--only", action="append", choices=_SCENARIOS, help="run only these scenarios")
    args = parser.parse_args(argv)

    from benchmarks.indexing import _hardware, _versions
    from semdup.data.paths import travel_dir
    from semdup.data.stackexchange import load_stackexchange_dump

    posts = list(load_stackexchange_dump(args.data or travel_dir()).posts.values())[: args.posts]
    load_before = os.getloadavg()[0]
    workdir = Path(tempfile.mkdtemp(prefix="semdup-reliability-"))
    rows: list[Row] = []
    versions: list[str] = []
    ready: list[str] = []
    stack: Stack | None = None
    try:
        for kind in args.broker or BROKERS:
            stack = Stack(args, workdir, kind)
            try:
                versions.append(f"{stack.name} {stack.version()}")
                for scenario in args.only or _SCENARIOS:
                    rows.append(run_scenario(stack, scenario, posts))
                    logger.info("%s %s: %s", kind, scenario, rows[-1])
                if (n := stack.ready_messages()) is not None:
                    ready.append(f"{stack.name}: {n} messages ready on the queue at the end")
            finally:
                stack.close()
    finally:
        if rows and all(r.census.lost == 0 for r in rows):
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"worker logs and broker state kept in {workdir}", file=sys.stderr)

    module = __spec__.name if __spec__ else __name__
    print(f"command:   python -m {module} {shlex.join(argv if argv is not None else sys.argv[1:])}")
    print(
        f"hardware:  {_hardware()}; load average {load_before:.2f} at the start, {os.getloadavg()[0]:.2f} at the end"
    )
    opensearch = stack.client.info()["version"]["number"] if stack else "?"
    print(f"versions:  {_versions()}; OpenSearch {opensearch}; {', '.join(versions)}")
    print(
        f"setup:     {len(posts)} Travel posts per scenario in batches of {args.batch_size}; bundle "
        f"{stack.bundle.version if stack else '?'}; one `semdup worker -c 1`; its own broker; retry budget "
        f"{args.budget:.0f} s; visibility timeout {args.visibility_timeout} s (Redis); sweeper bound "
        f"{args.sweep_after:.0f} s"
    )
    _print(rows)
    for line in ready:
        print(line)
    lost = sum(r.census.lost or 0 for r in rows)
    print(f"lost: {lost} ({'OK' if lost == 0 else 'FAIL'})")
    return 0 if lost == 0 else 1


if __name__ == "__main__":
    from benchmarks import run_main

    run_main(main)
