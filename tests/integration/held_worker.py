"""A real ``semdup worker`` that stops at a chosen point and waits there to be killed (test-only, not the library).

The kill tests SIGKILL a worker at an exact point instead of racing it with sleeps: they start this script
(``LocalWorker(..., program=[path of this file])``), wait for its signal file, and kill the process group. It
installs one hook, then runs semdup's CLI (``worker ...``) unchanged:

``SEMDUP_TEST_HOLD=delivery``
    in the worker's consumer (main process), the Nth time kombu's Redis transport hands a message to the
    consumer: after the BRPOP reply was read and parsed (the message has left the queue's list on the server)
    and before ``QoS.append`` records it in the ``unacked`` hash (its HSET). The message is then in neither
    place: the gap of issue #17.
``SEMDUP_TEST_HOLD=task``
    in the pool process, when the Nth task starts (``task_prerun``): the message is delivered and held
    unacknowledged (in Redis's ``unacked`` hash, or by the worker's channel on RabbitMQ).

``SEMDUP_TEST_HOLD_AT`` is N (default 1); ``SEMDUP_TEST_HOLD_SIGNAL`` the file written, as JSON ``{"task_id",
"pid"}``, when it holds (written to a temporary name and renamed, so a reader never sees half of it).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

_count = 0
_lock = threading.Lock()


def _hold(task_id: str) -> None:
    """Signal that we hold ``task_id`` and block until killed."""
    signal_file = Path(os.environ["SEMDUP_TEST_HOLD_SIGNAL"])
    tmp = signal_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"task_id": task_id, "pid": os.getpid()}))
    os.replace(tmp, signal_file)
    threading.Event().wait()  # until SIGKILL


def _due() -> bool:
    global _count
    with _lock:
        _count += 1
        return _count == int(os.environ.get("SEMDUP_TEST_HOLD_AT", "1"))


def _install_delivery_hold() -> None:
    from kombu.transport import redis as kombu_redis

    append = kombu_redis.QoS.append

    def held_append(self: Any, message: Any, delivery_tag: str) -> None:
        if _due():
            _hold(str((message.headers or {}).get("id", delivery_tag)))
        append(self, message, delivery_tag)

    kombu_redis.QoS.append = held_append


def _install_task_hold() -> None:
    from celery.signals import task_prerun

    def held_prerun(task_id: str | None = None, **_: Any) -> None:
        if _due():
            _hold(str(task_id))

    task_prerun.connect(held_prerun, weak=False)


def main() -> None:
    mode = os.environ.get("SEMDUP_TEST_HOLD", "")
    if mode == "delivery":
        _install_delivery_hold()
    elif mode == "task":
        _install_task_hold()
    elif mode:
        sys.exit(f"SEMDUP_TEST_HOLD must be 'delivery' or 'task', got {mode!r}")
    from semdup.cli import main as semdup_main

    semdup_main()


if __name__ == "__main__":
    main()
