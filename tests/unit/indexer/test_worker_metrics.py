"""Worker metrics: counters and the batch histogram move with real Celery task signals, summed over processes.

The unit tests use a private registry. The multiprocess tests run in fresh interpreters (prometheus_client's
mode is chosen per process) and read the numbers back over HTTP from ``start_metrics_server``; the last one
runs a real Celery prefork worker on a real Redis.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from semdup.apps.settings import load_settings
from semdup.core.errors import ConfigError
from semdup.devstack.local_process import any_free_port
from semdup.indexer.worker_metrics import WorkerMetrics, WorkerMetricsSettings

prometheus_client = pytest.importorskip("prometheus_client", reason='worker metrics need "semdup[serve]"')
from prometheus_client import CollectorRegistry  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def test_counters_and_histogram_increase() -> None:
    registry = CollectorRegistry()
    m = WorkerMetrics(registry=registry)
    m.record_batch("index_posts", {"written": 62, "parked": 2}, 0.7)
    m.record_batch("index_posts", {"written": 64, "parked": 0}, 0.3)
    m.record_batch("delete_posts", {"deleted": 5, "parked": 0}, 0.01)
    m.record_failure("index_posts", ConnectionError("down"), 12.0)
    m.record_retry("index_posts")
    assert _value(registry, "semdup_worker_posts_indexed_total", task="index_posts") == 126
    assert _value(registry, "semdup_worker_posts_indexed_total", task="delete_posts") == 5
    assert _value(registry, "semdup_worker_posts_parked_total", task="index_posts") == 2
    assert _value(registry, "semdup_worker_task_failures_total", task="index_posts", error="ConnectionError") == 1
    assert _value(registry, "semdup_worker_task_retries_total", task="index_posts") == 1
    assert _value(registry, "semdup_worker_batch_seconds_count", task="index_posts") == 3
    assert _value(registry, "semdup_worker_batch_seconds_bucket", task="index_posts", le="0.5") == 1
    assert _value(registry, "semdup_worker_batch_seconds_sum", task="index_posts") == pytest.approx(13.0)


def test_result_without_counts_only_times_the_batch() -> None:
    registry = CollectorRegistry()
    m = WorkerMetrics(registry=registry)
    m.record_batch("backfill_batch", None, 1.0)
    assert _value(registry, "semdup_worker_batch_seconds_count", task="backfill_batch") == 1
    assert _value(registry, "semdup_worker_posts_indexed_total", task="backfill_batch") == 0


def test_settings_from_env() -> None:
    assert load_settings(env={}).metrics.port is None
    s = load_settings(env={"SEMDUP_METRICS_PORT": "9108", "PROMETHEUS_MULTIPROC_DIR": "/tmp/m"}).metrics
    assert (s.port, s.addr, s.multiproc_dir) == (9108, "0.0.0.0", "/tmp/m")
    with pytest.raises(ConfigError, match="SEMDUP_METRICS_PORT must be a TCP port number, got 'nine'"):
        load_settings(env={"SEMDUP_METRICS_PORT": "nine"})
    with pytest.raises(ConfigError, match="1-65535"):
        WorkerMetricsSettings(port=70000)


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


_PROBE_APP = """
import os
from celery import Celery
from semdup.indexer import worker_metrics

app = Celery("probe", broker=os.environ.get("PROBE_BROKER", "memory://"), set_as_current=False)
app.conf.update(task_default_queue=os.environ.get("PROBE_QUEUE", "probe"), accept_content=["json"],
                task_ignore_result=True, worker_hijack_root_logger=False, worker_prefetch_multiplier=1,
                task_acks_late=True)

@app.task(name="semdup.indexer.probe_ok")
def probe_ok(n):
    return {"written": n, "parked": 1}

@app.task(name="semdup.indexer.probe_fail")
def probe_fail():
    raise ValueError("probe failure")

from semdup.apps.settings import load_settings

worker_metrics.connect_signals(load_settings().metrics)  # what semdup.apps.worker does: the tree's metrics section
"""


def test_forked_processes_add_up_in_one_scrape(tmp_path: Path) -> None:
    """Celery's own signals (eager ``apply``) in three forked processes; one HTTP scrape shows the sum."""
    (tmp_path / "probe_app.py").write_text(_PROBE_APP)
    port = any_free_port()
    script = textwrap.dedent(
        """
        import os, sys, json, urllib.request
        from celery import signals
        import probe_app
        signals.worker_init.send(sender=None)          # what a worker's main process does: serve /metrics
        pids = []
        for child in range(3):
            pid = os.fork()
            if pid == 0:
                for _ in range(4):
                    probe_app.probe_ok.apply(args=[10])
                probe_app.probe_fail.apply()
                signals.worker_process_shutdown.send(sender=None)
                os._exit(0)
            pids.append(pid)
        codes = [os.waitpid(p, 0)[1] for p in pids]
        print(json.dumps(codes))
        port = int(os.environ["SEMDUP_METRICS_PORT"])
        print(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode())
        """
    )
    env = dict(os.environ, SEMDUP_METRICS_PORT=str(port), PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "mp"))
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env.get("PYTHONPATH", "")
    (tmp_path / "mp").mkdir()
    (tmp_path / "mp" / "counter_99999.db").write_bytes(b"stale from an earlier run")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, _, text = proc.stdout.partition("\n")
    assert first == "[0, 0, 0]"
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    assert samples[("semdup_worker_posts_indexed_total", (("task", "probe_ok"),))] == 120
    assert samples[("semdup_worker_posts_parked_total", (("task", "probe_ok"),))] == 12
    assert samples[("semdup_worker_task_failures_total", (("error", "ValueError"), ("task", "probe_fail")))] == 3
    assert samples[("semdup_worker_batch_seconds_count", (("task", "probe_ok"),))] == 12
    assert not (tmp_path / "mp" / "counter_99999.db").exists()


@pytest.mark.broker
def test_real_prefork_worker_on_redis(tmp_path: Path, redis_url: str) -> None:
    """A real ``celery worker --pool prefork -c 2`` on Redis serves the sum of its children's counts."""
    (tmp_path / "probe_app.py").write_text(_PROBE_APP)
    port = any_free_port()
    queue = f"probe-{uuid.uuid4().hex[:8]}"
    env = dict(
        os.environ,
        SEMDUP_METRICS_PORT=str(port),
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "mp"),
        PROBE_BROKER=redis_url,
        PROBE_QUEUE=queue,
    )
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env.get("PYTHONPATH", "")
    log = open(tmp_path / "worker.log", "wb")
    cmd = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "probe_app",
        "worker",
        "--pool=prefork",
        "--concurrency=2",
        f"--queues={queue}",
        "--without-mingle",
        "--without-gossip",
        "--loglevel=INFO",
    ]
    worker = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        sys.path.insert(0, str(tmp_path))
        os.environ["PROBE_BROKER"], os.environ["PROBE_QUEUE"] = redis_url, queue
        import probe_app

        for _ in range(6):
            probe_app.probe_ok.apply_async(args=[7], queue=queue)
        probe_app.probe_fail.apply_async(queue=queue)
        want = {
            ("semdup_worker_posts_indexed_total", (("task", "probe_ok"),)): 42,
            ("semdup_worker_posts_parked_total", (("task", "probe_ok"),)): 6,
            ("semdup_worker_task_failures_total", (("error", "ValueError"), ("task", "probe_fail"))): 1,
            ("semdup_worker_batch_seconds_count", (("task", "probe_ok"),)): 6,
        }
        deadline = time.monotonic() + 90  # a wait for the worker, not a timing assertion
        got: dict = {}
        while time.monotonic() < deadline:
            try:
                got = _scrape(port)
            except OSError:
                got = {}
            if all(got.get(k) == v for k, v in want.items()):
                break
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
            time.sleep(0.5)
        assert {k: got.get(k) for k in want} == want, (tmp_path / "worker.log").read_text()[-3000:]
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("probe_app", None)
        os.environ.pop("PROBE_BROKER", None)
        os.environ.pop("PROBE_QUEUE", None)
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=10)
        log.close()
