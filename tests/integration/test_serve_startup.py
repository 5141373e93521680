"""``semdup serve`` with a bundle that cannot load, and 2 uvicorn workers: it exits 1 with one line, in both log
formats, instead of workers that die and are restarted forever (text) or an exit 0 (JSON).

Real tampered bundles (the tiny exported bow-cnn with one byte of encoder.onnx flipped, or vocab.json removed), a
real ``semdup serve`` subprocess. Then the second line of defence on its own: the workers themselves failing to
start (the bundle checked by ``semdup serve`` is not the one they find), through :func:`run_workers` and the real
factory, still ends the command with exit 1 and one ``could not start`` line per worker, never a traceback.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from semdup.devstack.local_process import any_free_port

FORMATS = ["text", "json"]
_TIMEOUT = 180  # seconds for the command to give up: start-up, not a timing assertion


def _tampered(tiny_bundle: Path, root: Path, how: str) -> Path:
    out = root / how
    shutil.copytree(tiny_bundle, out)
    if how == "flipped-byte":
        data = bytearray((out / "encoder.onnx").read_bytes())
        data[len(data) // 2] ^= 0x01
        (out / "encoder.onnx").write_bytes(bytes(data))
    else:
        (out / "vocab.json").unlink()
    return out


def _env(fmt: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEMDUP_")}
    return {
        **env,
        "SEMDUP_AUTH": "off",
        "SEMDUP_LOG_FORMAT": fmt,
        "SEMDUP_OPENSEARCH_URL": "http://127.0.0.1:9",  # never called: nothing may get that far
    }


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("how", ["flipped-byte", "missing-file"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_serve_with_a_broken_bundle_exits_1_in_one_line(fmt: str, how: str, tiny_bundle: Path, tmp_path: Path) -> None:
    broken = _tampered(tiny_bundle, tmp_path, how)
    cmd = [sys.executable, "-m", "semdup", "serve", "--bundle", str(broken), "--index", "questions", "--workers", "2"]
    out = subprocess.run(
        [*cmd, "--port", str(any_free_port())],
        env=_env(fmt),
        capture_output=True,
        text=True,
        timeout=_TIMEOUT,
        check=False,
    )
    assert out.returncode == 1, out.stderr
    (line,) = _lines(out.stdout + out.stderr)
    said = "sha256" if how == "flipped-byte" else "lacks vocab.json"
    if fmt == "json":
        record = json.loads(line)
        assert record["level"] == "ERROR" and record["exit_code"] == 1, record
        line = record["message"]
    assert line.startswith("Error: ") and said in line and "re-export" in line or "incomplete" in line, line


@pytest.mark.parametrize("fmt", FORMATS)
def test_workers_that_cannot_start_end_the_command_with_exit_1(fmt: str, tiny_bundle: Path, tmp_path: Path) -> None:
    """No check before the workers here: both load the broken bundle, a worker logs one line and exits with uvicorn's
    STARTUP_FAILURE, the supervisor stops the other (which may have failed too, or not yet), and the command exits 1
    with the reason (not 0, not a restart loop)."""
    broken = _tampered(tiny_bundle, tmp_path, "flipped-byte")
    script = (  # what `semdup serve` runs after its own check, and how the CLI reports a SemdupError
        "import sys\n"
        "from semdup.core.errors import SemdupError\n"
        "from semdup.apps.http import configure_service_logging\n"
        "from semdup.service.workers import run_workers\n"
        "configure_service_logging()\n"
        "try:\n"
        f"    run_workers('semdup.apps.http:app_from_env', host='127.0.0.1', port={any_free_port()},"
        " workers=2, log_level='info', access_log=False, log_config=None)\n"
        "except SemdupError as exc:\n"
        "    sys.exit(f'Error: {exc}')\n"
    )
    env = {**_env(fmt), "SEMDUP_BUNDLE": str(broken), "SEMDUP_INDEX": "questions"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=_TIMEOUT, check=False
    )
    assert out.returncode == 1, out.stderr
    *lines, last = _lines(out.stderr)
    # uvicorn stops the other worker as soon as one has failed: it may have exited 3 too, or been terminated first
    assert re.match(r"Error: [12] of 2 uvicorn worker process\(es\) could not start", last), out.stderr
    if fmt == "json":
        messages = [json.loads(line)["message"] for line in lines]  # one JSON object a line, tracebacks inside
    else:
        assert "Traceback" not in out.stderr
        messages = lines
    failed = [m for m in messages if "the reranking service could not start" in m]
    assert 1 <= len(failed) <= 2 and all("sha256" in m for m in failed), out.stderr
    assert any("Child process" in m and "failed to start" in m for m in messages), out.stderr
    assert not any("died" in m for m in messages), out.stderr  # uvicorn never restarted one
