"""The HTTP service under a burst of concurrent callers, with and without admission control, in one run (not a test).

What an operator runs, on loopback: its own OpenSearch node (a temporary state folder and a free port, stopped and
removed at the end; ``--opensearch URL`` uses a running one instead), an index of ``--posts`` real Travel posts with
the bundle's fields (``index_batch``, the default index: BM25 candidates), and ``semdup serve --workers 2`` started
as a subprocess for each admission limit of ``--limits`` (``0``: no bound, the baseline; ``default``: the service's
own ``SEMDUP_MAX_IN_FLIGHT``; or a number), all of them before the first row. Then for each count of ``--callers``,
against each service in turn (so the rows compared run one right after the other, ``--rounds`` times):

* C callers start at once, each making ``--calls`` calls of ``POST /v1/rerank`` with held-out Travel posts (the
  posts after the indexed ones) on a keep-alive connection of its own (a minimal asyncio HTTP/1.1 client, so the
  callers' own CPU stays small beside the service's). A call answered 503 is sent again after the
  ``Retry-After`` it was given plus a random share of it (a well-behaved client's backoff, seeded per caller),
  until ``--give-up`` seconds after the call began. Every request is bounded by ``--timeout``;
* meanwhile a prober process asks ``GET /healthz`` every ``--probe-every`` seconds on a fresh connection each time
  (as the kubelet does), bounded by ``--probe-timeout``.

Per row it prints the requests sent and their answers, 200 / 503 / other (another status, a timeout or a refused
connection), the p50 / p95 / p99 latency of the 200s, the p99 time a call took to be answered 200 (its 503s and
waits included), the 200s per second, the worst and the p99 ``/healthz`` latency with its failures, the wall time
and the load average (1 min) at the end of the row; "server p99 ms" is the service's own view of the same 200s
(its JSON request log: from admission to answer); then the ratios of each limit's row to the baseline's at the
same number of callers. The callers, the service and OpenSearch share this machine's cores, and
other work may too: compare rows of one run, not runs.

Example::

    semdup fit-default --base-encoder minilm --data travel --out artifacts/bundles/default-minilm-travel
    python -m benchmarks.service_load --bundle artifacts/bundles/default-minilm-travel
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import multiprocessing
import os
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import run_main
from benchmarks.bench_stack import START_S, serve_process
from benchmarks.indexing import _hardware, _versions
from benchmarks.report import format_table, ratio, summary
from semdup.devstack.local_opensearch import own_opensearch

logger = logging.getLogger(__name__)



@dataclass
class Outcomes:
    """What one row's requests got: the status of each (0 = no answer), the seconds of each 200, the seconds from
    each call's first request to its 200 (retries included), the seconds of each /healthz probe (its timeout when it
    failed) and how many probes failed."""

    statuses: list[int] = field(default_factory=list)
    ok_s: list[float] = field(default_factory=list)
    done_s: list[float] = field(default_factory=list)
    server_ms: list[float] = field(default_factory=list)
    probe_s: list[float] = field(default_factory=list)
    probe_failures: int = 0
    wall_s: float = 0.0


def row_cells(limit: str, callers: int, out: Outcomes, load: float) -> list[object]:
    """One printed row: the answers by kind, the 200s' latency (ms) and throughput, /healthz, wall, load."""
    ok = sum(s == 200 for s in out.statuses)
    shed = sum(s == 503 for s in out.statuses)
    lat, probe = summary([s * 1000 for s in out.ok_s]), summary([s * 1000 for s in out.probe_s])
    done, server = summary(out.done_s), summary(out.server_ms)
    per_s = ok / out.wall_s if out.wall_s else float("nan")
    return [
        limit,
        callers,
        len(out.statuses),
        ok,
        shed,
        len(out.statuses) - ok - shed,
        lat["p50"],
        lat["p95"],
        lat["p99"],
        server["p99"],
        done["p99"],
        per_s,
        probe["max"],
        probe["p99"],
        f"{out.probe_failures}/{probe['n']}",
        out.wall_s,
        load,
    ]


HEADERS = [
    "limit",
    "callers",
    "calls",
    "200",
    "503",
    "other",
    "p50 ms",
    "p95 ms",
    "p99 ms",
    "server p99 ms",
    "call p99 s",
    "200s/s",
    "healthz max ms",
    "healthz p99 ms",
    "probe fail",
    "wall s",
    "load 1m",
]


class _Connection:
    """One keep-alive HTTP/1.1 connection speaking just what this benchmark sends and the service answers (a JSON
    body with Content-Length). The callers share the service's cores, so their own cost must stay small: httpx costs
    about a millisecond of CPU per request, and one httpx pool shared by 200 waiting callers added seconds per request
    on the callers' side (measured: p99 21 s seen by the callers, 0.9 s by the service, same run)."""

    def __init__(self, host: str, port: int, key: str) -> None:
        self.host, self.port, self.key = host, port, key
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, dict[str, str]]:
        """(status, lower-cased headers) of one POST; the connection is reopened after any failure."""
        try:
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            assert self.reader is not None
            head = (
                f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nX-API-Key: {self.key}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            self.writer.write(head.encode("ascii") + body)
            await self.writer.drain()
            lines = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 2)[1])
            headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
            await self.reader.readexactly(int(headers.get("content-length", "0")))
            if headers.get("connection", "").lower() == "close":
                await self.close()
            return status, headers
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await self.writer.wait_closed()
        self.reader = self.writer = None


async def _callers(base: str, key: str, payloads: Sequence[dict[str, Any]], callers: int, args: Any) -> Outcomes:
    import json
    from urllib.parse import urlsplit

    out = Outcomes()
    where = urlsplit(base)
    bodies = [json.dumps(p).encode("utf-8") for p in payloads]

    async def caller(n: int) -> None:
        conn = _Connection(where.hostname or "127.0.0.1", where.port or 80, key)
        jitter = random.Random(n)
        try:
            for i in range(args.calls):
                body = bodies[(n * args.calls + i) % len(bodies)]
                began = time.perf_counter()
                while True:
                    t0 = time.perf_counter()
                    headers: dict[str, str] = {}
                    try:
                        status, headers = await asyncio.wait_for(conn.post("/v1/rerank", body), args.timeout)
                    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError):
                        status = 0
                    took = time.perf_counter() - t0
                    out.statuses.append(status)
                    if status == 200:
                        out.ok_s.append(took)
                        out.done_s.append(time.perf_counter() - began)
                    if status != 503 or time.perf_counter() - began > args.give_up:
                        break
                    wait = float(headers.get("retry-after", 1))
                    await asyncio.sleep(wait * (1 + jitter.random()))
        finally:
            await conn.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(caller(n) for n in range(callers)))
    out.wall_s = time.perf_counter() - t0
    return out


def _probe(base: str, every: float, timeout: float, stop: Any, started: Any, results: Any) -> None:
    """``GET /healthz`` every ``every`` seconds, a new connection each time, until ``stop`` is set; ``started`` is set
    after the first answer, and (seconds of each probe, failures) go back through ``results`` at the end."""
    import httpx

    out = Outcomes()
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            ok = httpx.get(f"{base}/healthz", timeout=timeout).status_code == 200
        except httpx.HTTPError:
            ok = False
        took = time.perf_counter() - t0
        out.probe_s.append(took if ok else max(took, timeout))
        out.probe_failures += not ok
        started.set()
        stop.wait(max(0.0, every - took))
    results.send((out.probe_s, out.probe_failures))


def served_ms(log: Path, offset: int) -> list[float]:
    """The service's own time (ms, from its JSON request records past ``offset``) of each ``/v1/rerank`` answered
    200: from the request reaching the app (admitted, body read) to its answer, without the time it waited before."""
    import json

    out = []
    with log.open("rb") as f:
        f.seek(offset)
        for line in f:
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if record.get("message") == "request" and record.get("path") == "/v1/rerank":
                    if record.get("status") == 200:
                        out.append(float(record["ms"]))
    return out


def run_row(base: str, key: str, payloads: Sequence[dict[str, Any]], callers: int, args: Any) -> Outcomes:
    """One burst of ``callers`` callers with the prober running from before the first call to after the last.

    The prober is a process of its own: as a thread beside the callers' event loop it would wait for that loop's
    GIL, and the callers' own stalls would be counted as the service's."""
    ctx = multiprocessing.get_context("spawn")
    stop, started = ctx.Event(), ctx.Event()
    results, sender = ctx.Pipe(duplex=False)
    prober = ctx.Process(
        target=_probe, args=(base, args.probe_every, args.probe_timeout, stop, started, sender), daemon=True
    )
    prober.start()
    try:
        if not started.wait(START_S):
            raise RuntimeError(f"the /healthz prober got no answer within {START_S} s")
        out = asyncio.run(_callers(base, key, payloads, callers, args))
    finally:
        stop.set()
        probed = results.recv() if results.poll(args.probe_timeout + 30) else ([], 0)
        prober.join(timeout=30)
    out.probe_s, out.probe_failures = probed
    return out


def serving(
    bundle: str, index: str, url: str, workers: int, limit: str, log: Path
) -> contextlib.AbstractContextManager[tuple[str, str]]:
    """``semdup serve`` as an operator starts it (its defaults, ``--workers``, a fresh key, ``limit`` unless
    ``default``), yielding (base URL, key) once ``/readyz`` answers 200; stopped with SIGTERM afterwards."""
    env = {k: v for k, v in os.environ.items() if k != "SEMDUP_MAX_IN_FLIGHT"}
    env["SEMDUP_LOG_FORMAT"] = "json"
    if limit != "default":
        env["SEMDUP_MAX_IN_FLIGHT"] = limit
    return serve_process(bundle, index, url, env, log, workers=workers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--bundle", required=True, help="model bundle directory or .tar.gz")
    parser.add_argument("--opensearch", default=None, help="a running OpenSearch (default: a node of this run's own)")
    parser.add_argument("--posts", type=int, default=1000, help="Travel posts in the index")
    parser.add_argument("--queries", type=int, default=200, help="held-out Travel posts the callers send")
    parser.add_argument("--callers", default="50,200", help="comma-separated concurrent callers, one row each")
    parser.add_argument("--calls", type=int, default=5, help="calls per caller")
    parser.add_argument("--limits", default="0,default", help="SEMDUP_MAX_IN_FLIGHT per service: 0 = off, default")
    parser.add_argument("--workers", type=int, default=2, help="`semdup serve --workers`")
    parser.add_argument("--rounds", type=int, default=1, help="passes over the rows (callers x limits)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a call may take (then: other)")
    parser.add_argument("--give-up", type=float, default=120.0, help="seconds after which a 503'd call is dropped")
    parser.add_argument("--probe-every", type=float, default=0.1, help="seconds between /healthz probes")
    parser.add_argument("--probe-timeout", type=float, default=5.0, help="seconds a probe may take (then a failure)")
    args = parser.parse_args(argv)
    callers = [int(c) for c in args.callers.split(",") if c.strip()]
    limits = [c.strip() for c in args.limits.split(",") if c.strip()]
    logging.basicConfig(level=logging.WARNING)

    from benchmarks.site_index import site_posts
    from semdup.bundle.bundle import Bundle
    from semdup.core.settings import OpenSearchSettings
    from semdup.evaluation.through_reranker import semantic_index
    from semdup.index_format.schema import CandidateFields
    from semdup.opensearch_io.clients import connect
    from semdup.service.settings import ServiceSettings

    bundle = Bundle.load(args.bundle)
    every = site_posts()
    posts, queries = every[: args.posts], every[args.posts : args.posts + args.queries]
    payloads = [{"title": q.title, "body": q.body, "k": 10} for q in queries]
    default = ServiceSettings.model_fields["max_in_flight"].default
    print(f"command: {' '.join([sys.executable, '-m', __spec__.name if __spec__ else __name__, *sys.argv[1:]])}")
    print(f"hardware: {_hardware()}; load average at start {os.getloadavg()[0]:.2f} (other work shares these cores)")
    print(f"versions: {_versions()}")
    print(
        f"bundle {bundle.version}; {len(posts)} Travel posts indexed, {len(queries)} held-out posts as queries; "
        f"`semdup serve --workers {args.workers}`, limits {', '.join(limits)} (default = {default}); callers "
        f"{args.callers} x {args.calls} calls, a 503 is retried after 1-2 x Retry-After (up to {args.give_up:g} s); "
        f"/healthz every {args.probe_every} s, "
        f"timeout {args.probe_timeout} s"
    )
    rows: list[list[object]] = []
    work = Path(tempfile.mkdtemp(prefix="semdup-bench-service-load-logs-"))
    with own_opensearch(args.opensearch, "service-load") as url:
        client = connect(OpenSearchSettings(url=url))
        print(f"OpenSearch {client.info()['version']['number']} at {url}")
        with (
            semantic_index(client, bundle, posts, "service-load", progress=True, search=CandidateFields()) as index,
            contextlib.ExitStack() as services,
        ):
            started = {}  # every service runs before the first row: the rows compared run one right after the other
            for limit in limits:
                log = work / f"serve-{limit}.log"
                started[limit] = (
                    *services.enter_context(serving(args.bundle, index, url, args.workers, limit, log)),
                    log,
                )
            for _ in range(args.rounds):
                for n in callers:
                    for limit, (base, key, log) in started.items():
                        shown = f"{default} (default)" if limit == "default" else ("off" if limit == "0" else limit)
                        offset = log.stat().st_size
                        out = run_row(base, key, payloads, n, args)
                        out.server_ms = served_ms(log, offset)
                        rows.append(row_cells(shown, n, out, os.getloadavg()[0]))
                        print(format_table(HEADERS, [rows[-1]]).splitlines()[-1], flush=True)
    print(f"load average at end {os.getloadavg()[0]:.2f}; service logs in {work}")
    print(format_table(HEADERS, rows))
    for at, r in enumerate(rows):
        b = next((x for x in reversed(rows[:at]) if x[0] == "off" and x[1] == r[1]), None)  # the same pass's
        if b is not None and r[0] != "off":
            print(
                f"limit {r[0]} vs off, {r[1]} callers: "
                + ", ".join(
                    f"{name} {ratio(r[HEADERS.index(name)], b[HEADERS.index(name)])}"  # type: ignore[arg-type]
                    for name in ("p99 ms", "server p99 ms", "call p99 s", "200s/s", "healthz max ms")
                )
            )
    return 0


if __name__ == "__main__":
    run_main(main)
