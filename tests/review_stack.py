"""The review page's real parts for integration tests: flags written by a real flagging worker, a real `semdup
serve`, and one headless chromium (Debian's, driven by selenium through chromium-driver).

Shared by ``tests/integration/test_review_browser.py`` and ``test_review_roundtrip.py``. The bundle is the indexer
tests' untrained BOW-CNN over the Travel vocabulary (:mod:`indexer_stack`): its scores mean nothing, so each test
states its threshold, as an operator's calibration file would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from semdup.alerts.store import list_flags
from semdup.core.posts import Post
from semdup.devstack.local_process import any_free_port

CHROMIUM = os.environ.get("SEMDUP_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SEMDUP_TEST_CHROMEDRIVER", shutil.which("chromedriver") or "/usr/bin/chromedriver")
SESSION_SECRET = "review-test-secret-" + "x" * 24


def flags_by_post(client: Any, index: str) -> dict[str, set[str]]:
    """post id -> the ids it is flagged against, as the store holds them now."""
    out: dict[str, set[str]] = {}
    for f in list_flags(client, index):
        out.setdefault(f.post_id, set()).add(f.candidate_id)
    return out


def serve_env(opensearch_url: str, bundle_dir: Path, index: str, api_keys: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SEMDUP_OPENSEARCH_URL=opensearch_url,
        SEMDUP_BUNDLE=str(bundle_dir),
        SEMDUP_INDEX=index,
        SEMDUP_API_KEYS=api_keys,
        SEMDUP_SESSION_SECRET=SESSION_SECRET,
        SEMDUP_POST_URL="https://travel.stackexchange.com/questions/{id}",
        SEMDUP_REVIEW_STATS_TTL="0",
        OMP_NUM_THREADS="1",
    )
    env.pop("SEMDUP_API_KEY", None)
    env.update(extra)
    return env


@contextmanager
def semdup_serve(env: dict[str, str], log: Path, workers: int = 1) -> Iterator[str]:
    """A real `semdup serve` (``workers`` uvicorn workers) on a free port; yields its base URL, stops it afterwards."""
    from stub_servers import wait_until_answering

    port = any_free_port()
    out = log.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "semdup", "serve", "--port", str(port), "--workers", str(workers)],
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_answering(proc, base, log, path="/healthz")
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        out.close()


@contextmanager
def headless_chromium(download_dir: Path) -> Iterator[Any]:
    """One headless chromium through chromium-driver (no download of any browser: Debian's packages)."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail(f"chromium ({CHROMIUM}) and chromium-driver ({CHROMEDRIVER}) are needed: scripts/bootstrap.sh")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1360,1000",
    ):
        options.add_argument(arg)
    options.add_experimental_option("prefs", {"download.default_directory": str(download_dir)})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def copy_of(post: Post) -> Post:
    return Post(f"copy-of-{post.id}", post.title, post.body)
