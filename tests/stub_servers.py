"""Loopback HTTP stand-ins for a broken cluster, and the wait for a real `semdup serve`, shared by the service and
secrets tests."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def garbage_cluster(body: str) -> Iterator[str]:
    """A loopback HTTP server that answers every call with 200 and a body that is not JSON: the client's
    SerializationError carries the body into error messages and logs, tracebacks included. Yields ``host:port``."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Answer(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            data = body.encode("utf-8")
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_HEAD = do_PUT = _answer

        def log_message(self, *args: Any) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def wait_until_answering(proc: subprocess.Popen, base: str, log: Path, path: str = "/healthz") -> None:
    """Return once ``base + path`` answers 200; fail the test with the log's tail if the server exits or takes
    more than 120 s (waiting for start-up, not a timing assertion)."""
    import httpx
    import pytest

    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{base}{path}", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"semdup serve did not answer {path} with 200: {log.read_text()[-2000:]}")
        time.sleep(0.5)
