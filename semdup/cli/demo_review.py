"""``semdup demo --review``: after the table, a review page with real flags on the demo's Travel index.

1. ``semdup calibrate`` fits the flagging threshold and Platt probabilities from Travel's own duplicate links
   (PostLinks.xml: each linked post ranked against the index, its top 10 labelled by the links), into
   ``<workdir>/review.calibration.json`` (the bundle's own file beside it is left alone).
2. A real ``semdup worker`` with ``SEMDUP_FLAG_DUPLICATES=1`` and that calibration re-indexes the 231 Travel test
   questions (``semdup index-posts``, the same text, so the index does not change) and flags each against the whole
   index as it writes it.
3. ``semdup serve`` serves the page with a fresh review key and ``SEMDUP_POST_URL`` pointing at
   travel.stackexchange.com; the URL and the key are printed, and both processes run until Ctrl-C (the worker
   keeps flagging in the background while the first flags are already on the page).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

__all__ = ["review_step"]

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


def _stop(proc: subprocess.Popen, name: str) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        click.echo(f"{name} did not stop in 30 s; killed", err=True)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def review_step(
    client: Any, travel: Any, bundle: Path, index: str, workdir: Path, env: dict[str, str], port: int, run: Any
) -> None:
    """Calibrate from the links, flag the test questions with a real worker, serve /review until Ctrl-C.

    ``run(*args, env=...)`` runs one semdup step as its own process (the demo's ``_semdup``).
    """
    from semdup.alerts.store import list_flags
    from semdup.data.paths import travel_dir

    cal = workdir / "review.calibration.json"
    run(
        "calibrate",
        "--index",
        index,
        "--bundle",
        str(bundle),
        "--links",
        str(travel_dir() / "PostLinks.xml"),
        "--out",
        str(cal),
        env=env,
    )
    posts = workdir / "review-posts.jsonl"
    posts.write_text("".join(json.dumps(q.post.to_json()) + "\n" for q in travel.queries("test")), encoding="utf-8")
    flag_env = {**env, "SEMDUP_FLAG_DUPLICATES": "1", "SEMDUP_CALIBRATION": str(cal)}
    click.echo(f"$ SEMDUP_FLAG_DUPLICATES=1 semdup worker --bundle {bundle}   (in the background)", err=True)
    worker = subprocess.Popen(
        [sys.executable, "-m", "semdup", "worker", "--bundle", str(bundle), "-c", "1", "--loglevel", "WARNING"],
        env=flag_env,
        start_new_session=True,
    )
    server: subprocess.Popen | None = None
    try:
        run("index-posts", "--input", str(posts), "--index", index, "--bundle", str(bundle), env=flag_env)
        deadline = time.monotonic() + 300
        while not list_flags(client, index) and time.monotonic() < deadline:  # the worker flags after writing
            time.sleep(2)
        key = "demo-" + secrets.token_urlsafe(18)
        port = _free(port)
        serve_env = {
            **env,
            "SEMDUP_API_KEYS": f"{key}:{index}:review:demo",
            "SEMDUP_POST_URL": POST_URL,
            "SEMDUP_CALIBRATION": str(cal),
            "SEMDUP_SESSION_SECRET": secrets.token_urlsafe(32),
        }
        serve_env.pop("SEMDUP_API_KEY", None)
        click.echo(f"$ semdup serve --bundle {bundle} --index {index} --port {port}   (the review page)", err=True)
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "semdup",
                "serve",
                "--bundle",
                str(bundle),
                "--index",
                index,
                "--port",
                str(port),
                "--workers",
                "1",
            ],
            env=serve_env,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}/review"
        _wait_answering(url, server)
        flags = len(list_flags(client, index))
        click.echo(
            f"\nReview page: {url}\nLog in with the review key: {key}\n"
            f"{flags} pairs flagged so far (threshold fitted on Travel's duplicate links, {cal}); the worker "
            "goes on flagging the 231 Travel test questions in the background.\nCtrl-C stops the page and "
            "the worker."
        )
        server.wait()
        raise click.ClickException(f"semdup serve stopped (exit {server.returncode})")
    except KeyboardInterrupt:
        click.echo("\nstopping the review page and the worker", err=True)
    finally:
        if server is not None:
            _stop(server, "semdup serve")
        _stop(worker, "the flagging worker")


def _wait_answering(url: str, proc: subprocess.Popen, timeout: float = 180.0) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise click.ClickException(f"semdup serve exited (status {proc.returncode}) before answering")
        try:
            with urllib.request.urlopen(url.replace("/review", "/healthz"), timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1)
    raise click.ClickException(f"semdup serve did not answer at {url} in {timeout:.0f} s")
