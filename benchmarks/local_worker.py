"""A ``semdup worker`` subprocess for local runs, tests and fault benchmarks: start, SIGKILL, stop.

The worker runs in its own process session, so :meth:`LocalWorker.kill` takes the Celery main process and its
pool children together (a whole-worker crash), and its output goes to a log file that :meth:`LocalWorker.start`
watches for Celery's ``ready.`` line.

Example::

    worker = LocalWorker({**os.environ, "SEMDUP_BUNDLE": "b", "SEMDUP_OPENSEARCH_URL": url,
                          "SEMDUP_BROKER_URL": broker}, Path("worker.log"))
    worker.start()
    worker.kill()      # SIGKILL to the whole process group
    worker.start()     # a fresh one, same log
    worker.stop()      # SIGTERM (warm shutdown), SIGKILL after 30 s
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from semdup.core.errors import ConfigError

__all__ = ["LocalWorker"]


class LocalWorker:
    """One ``python -m semdup worker`` process group, its environment and its log."""

    def __init__(
        self,
        env: Mapping[str, str],
        log: Path,
        args: Sequence[str] = ("--concurrency", "1"),
        program: Sequence[str] = ("-m", "semdup"),
    ) -> None:
        self.env, self.log, self.args = dict(env), Path(log), list(args)
        self.program = list(program)  # what the interpreter runs: semdup's CLI, or a test's wrapper around it
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 120.0) -> None:
        """Start the worker and wait for its ``ready.`` line.

        Raises:
            ConfigError: the worker exited or was not ready within ``timeout`` (the message holds its log's tail).
        """
        start_at = self.log.stat().st_size if self.log.exists() else 0
        cmd = [sys.executable, *self.program, "worker", *self.args, "--loglevel", "INFO"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log.read_bytes()[start_at:].decode("utf-8", "replace")
            if "ready." in text:
                return
            if self.proc.poll() is not None:
                raise ConfigError(f"the worker exited with {self.proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.3)
        self.kill()
        raise ConfigError(f"the worker was not ready after {timeout:.0f} s:\n{self.text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL the whole worker (main process and pool children) and reap it."""
        if self.running and self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (Celery's warm shutdown hands unstarted messages back), then SIGKILL after ``timeout``."""
        if self.running and self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""
