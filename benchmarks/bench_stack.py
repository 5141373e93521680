"""What the service benchmarks start beside their own OpenSearch node
(:func:`semdup.devstack.local_opensearch.own_opensearch`): a real ``semdup serve``, stopped after.

    with own_opensearch(None, "service-load") as url, serve_process(bundle, "travel", env, log) as (base, key):
        httpx.get(f"{base}/v1/similar", params={"index": "travel", "title": "..."}, headers={"X-API-Key": key})

The service is started as an operator starts it (``python -m semdup serve``), with a fresh key, and given back once
``/readyz`` answers 200.
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

__all__ = ["serve_process", "START_S"]

START_S = 180  # seconds for `semdup serve` to answer /readyz (the bundle loads once per worker, plus the check)


@contextlib.contextmanager
def serve_process(
    bundle: str, index: str, url: str, env: Mapping[str, str], log: Path, *, workers: int = 1
) -> Iterator[tuple[str, str]]:
    """``semdup serve`` on a free loopback port against ``url`` with ``env`` (plus a fresh ``SEMDUP_API_KEY``);
    yields (base URL, key) once ``/readyz`` answers 200, and stops it with SIGTERM afterwards.

    Raises:
        RuntimeError: the service exited or was not ready within :data:`START_S` (its output is in ``log``).
    """
    import httpx

    from semdup.devstack.local_process import any_free_port

    port, key = any_free_port(), secrets.token_hex(16)
    full = {**env, "SEMDUP_API_KEY": key, "SEMDUP_OPENSEARCH_URL": url}
    cmd = [sys.executable, "-m", "semdup", "serve", "--bundle", bundle, "--index", index, "--port", str(port)]
    with log.open("ab") as sink:
        proc = subprocess.Popen([*cmd, "--workers", str(workers)], env=full, stdout=sink, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/readyz", timeout=5).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"semdup serve did not become ready within {START_S} s; see {log}")
            time.sleep(0.5)
        yield base, key
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
