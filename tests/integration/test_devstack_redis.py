"""The real Redis broker: it answers PING, and a stop/start keeps a queued item (append-only file)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import redis

from semdup.devstack.local_process import any_free_port
from semdup.devstack.local_redis import LocalRedis, running_url
from semdup.opensearch_io.clients import check_broker


@pytest.mark.broker
def test_session_broker_answers_ping(redis_url: str) -> None:
    check_broker(redis_url, timeout=5)
    client = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
    try:
        assert client.ping() is True
    finally:
        client.close()


@pytest.mark.broker
def test_restart_keeps_a_queued_item(tmp_path: Path) -> None:
    broker = LocalRedis(state_dir=tmp_path / "redis", port=any_free_port())
    url = broker.start()
    try:
        status = broker.status()
        assert status is not None and status["ping"] and status["aof_enabled"]
        client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        client.rpush("semdup-test-queue", '{"task": "index_posts", "ids": ["1", "2"]}')
        client.close()

        assert broker.stop() is True
        assert broker.status() is None and running_url(broker.state_dir) is None
        assert broker.start() == url

        client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        assert client.lrange("semdup-test-queue", 0, -1) == [b'{"task": "index_posts", "ids": ["1", "2"]}']
        client.close()

        cmd = [sys.executable, "-m", "semdup", "broker", "status", "--data", str(broker.state_dir)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(url + " ping=ok appendonly=True")
    finally:
        broker.stop()
    assert broker.stop() is False  # a second stop finds nothing to stop


def test_missing_redis_server_names_the_package(tmp_path: Path) -> None:
    from semdup.core.errors import ConfigError

    with pytest.raises(ConfigError, match="apt-get install redis-server"):
        LocalRedis(state_dir=tmp_path, binary="redis-server-that-is-not-installed").start()
