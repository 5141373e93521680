"""``semdup demo --review``: after the table, a review page with real flags on the demo's Travel index.

1. ``semdup calibrate`` fits the flagging threshold and Platt probabilities from Travel's own duplicate links
   (PostLinks.xml: each linked post ranked against the index, its top 10 labelled by the links), into
   ``<workdir>/review.calibration.json`` (the bundle's own file beside it is left alone).
2. A real ``semdup worker`` with ``SEMDUP_FLAG_DUPLICATES=1`` and that calibration re-indexes the 231 Travel test
   questions (``semdup index-posts``, the same text, so the index does not change) and flags each against the whole
   index as it writes it.
3. ``semdup serve`` serves the page with a fresh review key and ``SEMDUP_POST_URL`` pointing at
   travel.stackexchange.com; :func:`start_review` returns the :class:`ReviewPage` (URL, key, flags so far) with both
   processes running, and the caller waits on it until Ctrl-C (the worker keeps flagging in the background while
   the first flags are already on the page).
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from semdup.core.errors import SemdupError
from semdup.demo.run import DEMO_INDEX, Say, semdup_step, start_semdup, stop_process, to_stderr

__all__ = ["ReviewPage", "start_review"]

POST_URL = "https://travel.stackexchange.com/questions/{id}"


def _free(port: int) -> int:
    """``port`` when nothing listens there on the loopback, else a free one."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])


@dataclass
class ReviewPage:
    """The review page being served (``url``, log in with ``key``) and the worker flagging beside it."""

    url: str
    key: str
    flags: int
    calibration: Path
    server: subprocess.Popen
    worker: subprocess.Popen
    say: Say = to_stderr

    def wait(self) -> None:
        """Until the server stops (Ctrl-C raises KeyboardInterrupt here).

        Raises:
            SemdupError: ``semdup serve`` stopped by itself.
        """
        self.server.wait()
        raise SemdupError(f"semdup serve stopped (exit {self.server.returncode})")

    def stop(self) -> None:
        """Stop the page and the worker (SIGTERM, SIGKILL after 30 s)."""
        stop_process(self.server, "semdup serve", self.say)
        stop_process(self.worker, "the flagging worker", self.say)


def start_review(stack: dict[str, Any], workdir: Path, port: int, say: Say = to_stderr) -> ReviewPage:
    """Calibrate from the links, flag the test questions with a real worker, serve /review; both keep running.

    ``stack`` is :attr:`semdup.demo.result.DemoResult.stack` (the client, environment, Travel set and bundles).

    Raises:
        SemdupError: a step failed, or ``semdup serve`` did not answer (both processes are stopped then).
    """
    from semdup.alerts.store import list_flags
    from semdup.data.paths import travel_dir

    client, env, index, bundle = stack["client"], stack["env"], DEMO_INDEX, stack["bundles"]["travel"]
    cal = workdir / "review.calibration.json"
    semdup_step("calibrate", "--index", index, "--bundle", str(bundle), "--links", str(travel_dir() / "PostLinks.xml"),
                "--out", str(cal), env=env, say=say)
    posts = workdir / "review-posts.jsonl"
    posts.write_text("".join(json.dumps(q.post.to_json()) + "\n" for q in stack["travel"].queries("test")),
                     encoding="utf-8")
    flag_env = {**env, "SEMDUP_FLAG_DUPLICATES": "1", "SEMDUP_CALIBRATION": str(cal)}
    say(f"$ SEMDUP_FLAG_DUPLICATES=1 semdup worker --bundle {bundle}   (in the background)")
    worker = start_semdup(["worker", "--bundle", str(bundle), "-c", "1", "--loglevel", "WARNING"], flag_env)
    server: subprocess.Popen | None = None
    try:
        semdup_step("index-posts", "--input", str(posts), "--index", index, "--bundle", str(bundle), env=flag_env,
                    say=say)
        deadline = time.monotonic() + 300
        while not list_flags(client, index) and time.monotonic() < deadline:  # the worker flags after writing
            time.sleep(2)
        key = "demo-" + secrets.token_urlsafe(18)
        port = _free(port)
        serve_env = {**env, "SEMDUP_API_KEYS": f"{key}:{index}:review:demo", "SEMDUP_POST_URL": POST_URL,
                     "SEMDUP_CALIBRATION": str(cal), "SEMDUP_SESSION_SECRET": secrets.token_urlsafe(32)}
        serve_env.pop("SEMDUP_API_KEY", None)
        say(f"$ semdup serve --bundle {bundle} --index {index} --port {port}   (the review page)")
        server = start_semdup(["serve", "--bundle", str(bundle), "--index", index, "--port", str(port), "--workers",
                              "1"], serve_env)
        url = f"http://127.0.0.1:{port}/review"
        _wait_answering(url, server)
        return ReviewPage(url, key, len(list_flags(client, index)), cal, server, worker, say)
    except BaseException:
        if server is not None:
            stop_process(server, "semdup serve", say)
        stop_process(worker, "the flagging worker", say)
        raise


def _wait_answering(url: str, proc: subprocess.Popen, timeout: float = 180.0) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SemdupError(f"semdup serve exited (status {proc.returncode}) before answering")
        try:
            with urllib.request.urlopen(url.replace("/review", "/healthz"), timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1)
    raise SemdupError(f"semdup serve did not answer at {url} in {timeout:.0f} s")
