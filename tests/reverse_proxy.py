"""A real reverse proxy for integration tests: Debian's nginx, started on a free port in front of a service.

It forwards as a site's proxy does: ``X-Forwarded-For`` with the client's address appended
(``$proxy_add_x_forwarded_for``) and ``X-Forwarded-Proto``. scripts/bootstrap.sh installs nginx (``apt-get install
nginx``); where it is missing the test that needs it is skipped, saying so. Nothing is written outside the folder
given: configuration, pid file, logs and temporary files all live there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from semdup.devstack.local_process import any_free_port

NGINX = os.environ.get("SEMDUP_TEST_NGINX", shutil.which("nginx") or "/usr/sbin/nginx")

_CONF = """
{user}
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {root}/body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass {upstream};
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
        }}
    }}
}}
"""


@contextmanager
def nginx_in_front(upstream: str, root: Path) -> Iterator[str]:
    """nginx proxying to ``upstream`` (``http://127.0.0.1:PORT``) from a free port; yields its base URL.

    Skips the test when nginx is not installed (scripts/bootstrap.sh installs it).
    """
    if not Path(NGINX).exists():
        pytest.skip(f"nginx is not installed ({NGINX}): scripts/bootstrap.sh installs it (apt-get install nginx)")
    root.mkdir(parents=True, exist_ok=True)
    port = any_free_port()
    user = "user root;" if os.geteuid() == 0 else ""  # its worker would otherwise run as nobody, outside root's tmp
    conf = root / "nginx.conf"
    conf.write_text(_CONF.format(user=user, root=root, port=port, upstream=upstream), encoding="utf-8")
    log = (root / "nginx.out").open("wb")
    proc = subprocess.Popen(
        [NGINX, "-p", str(root), "-c", str(conf), "-e", str(root / "error.log"), "-g", "daemon off;"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:  # waiting for it to listen, not a timing assertion
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                errors = (root / "error.log").read_text() if (root / "error.log").exists() else ""
                pytest.fail(f"nginx did not proxy {upstream}: {errors[-2000:]}")
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        log.close()
