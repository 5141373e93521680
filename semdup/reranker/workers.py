"""The service's uvicorn worker processes, run so that a worker that cannot start stops the service with an error.

uvicorn's multi-process supervisor (0.54, ``uvicorn.supervisors.Multiprocess``) restarts a worker that dies, unless
the worker's exit status is ``STARTUP_FAILURE`` (3): then it stops every worker and returns, exactly as it does
after SIGTERM, and ``uvicorn.run`` returns normally: the command exited 0 and a supervisor with restart-on-failure
did nothing. A worker that raised instead (any other status) was restarted forever while the port stayed bound.
So the service's factory exits with that status whatever went wrong (:func:`semdup.reranker.service.app_from_env`),
and :func:`run_workers` runs the supervisor itself and looks at its workers' exit statuses afterwards::

    run_workers("semdup.reranker.service:app_from_env", host="127.0.0.1", port=8080, workers=2)
    # returns after SIGTERM/SIGINT; raises ConfigError when a worker could not start

``semdup serve`` first runs the workers' own load once (:func:`preflight`), so a broken bundle never gets that far;
:func:`run_workers` is what still catches a worker that fails on its own (the bundle changed on disk since, a worker
restarted later that cannot load it).

The preflight runs in a spawned process of its own, not in the supervisor: the supervisor lives as long as the
service and serves nothing, and a bundle loaded there and dropped again still left it holding memory (MiniLM
hybrid: 178 MiB resident afterwards instead of 92, 394 MiB at the peak; measured with ``/proc/PID/status``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from semdup.core.errors import ConfigError

if TYPE_CHECKING:
    from semdup.reranker.settings import ServiceSettings

__all__ = ["preflight", "run_workers", "STARTUP_FAILURE"]

logger = logging.getLogger(__name__)

STARTUP_FAILURE = 3  # uvicorn.config.STARTUP_FAILURE: "this worker cannot start, do not restart it"


def _load_version(settings: ServiceSettings) -> str:
    from semdup.reranker.service import load_reranker

    return load_reranker(settings).version


def preflight(settings: ServiceSettings, log_format: str) -> str:
    """Load and verify what a worker will serve (:func:`semdup.reranker.service.load_reranker`: the bundle's hashes,
    manifest, onnxruntime session and its probes, the calibration) in a spawned process, and return the model
    version; the process and its memory are gone when this returns.

    Raises:
        BundleError, ConfigError: what the load raised in that process (a broken bundle, a setting it cannot serve).
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from semdup.reranker.service import configure_service_logging

    with ProcessPoolExecutor(
        max_workers=1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=configure_service_logging,
        initargs=(log_format,),
    ) as child:
        return child.submit(_load_version, settings).result()


def _failed(count: int, workers: int) -> ConfigError:
    return ConfigError(
        f"{count} of {workers} uvicorn worker process(es) could not start (exit status {STARTUP_FAILURE}); each "
        "logged why just above. Nothing is served: fix that and start `semdup serve` again"
    )


def run_workers(app: str, *, host: str, port: int, workers: int, http: str | None = None, **config: Any) -> None:
    """Serve the factory ``app`` (``module:function``) with ``workers`` uvicorn processes until a signal stops them.

    ``config``: more ``uvicorn.Config`` arguments (``log_level``, ``access_log``, ``log_config``, ...).

    Raises:
        ConfigError: a worker could not start (it exited with :data:`STARTUP_FAILURE`); the workers are stopped.
    """
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    if http is not None:
        config["http"] = http
    cfg = uvicorn.Config(app, factory=True, host=host, port=port, workers=workers, **config)
    if workers == 1:
        server = uvicorn.Server(config=cfg)
        try:
            server.run()
        except SystemExit as exc:
            if exc.code != STARTUP_FAILURE:
                raise
            raise _failed(1, 1) from None
        except KeyboardInterrupt:
            return
        if not server.started and not server.should_exit:
            raise _failed(1, 1)
        return
    sock = cfg.bind_socket()
    supervisor = Multiprocess(cfg, sockets=[sock])
    try:
        supervisor.run()
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    failed = [p for p in supervisor.processes if p.exitcode == STARTUP_FAILURE]
    if failed:
        raise _failed(len(failed), workers)
