"""Throwaway embedded services for a test session or module: a fresh temporary folder, a free port, started; then
stopped and the folder deleted (shared by the OpenSearch and Redis fixtures)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from semdup.devstack.local_process import any_free_port

Service = TypeVar("Service")


@contextmanager
def throwaway(make: Callable[..., Service], prefix: str, timeout: float, **kwargs: Any) -> Iterator[Service]:
    """``make(state_dir=…, port=…, **kwargs)`` started within ``timeout`` seconds (``LocalOpenSearch``,
    ``LocalRedis``); stopped and its folder removed afterwards, a failed start included."""
    state_dir = Path(tempfile.mkdtemp(prefix=prefix))
    service = make(state_dir=state_dir, port=any_free_port(), **kwargs)
    try:
        service.start(timeout=timeout)
        yield service
    finally:
        service.stop()
        shutil.rmtree(state_dir, ignore_errors=True)
