"""The service's uvicorn worker processes, run so that a worker that cannot start stops the service with an error.

uvicorn's multi-process supervisor (0.54, ``uvicorn.supervisors.Multiprocess``) restarts a worker that dies, unless
the worker's exit status is ``STARTUP_FAILURE`` (3): then it stops every worker and returns, exactly as it does
after SIGTERM, and ``uvicorn.run`` returns normally: the command exited 0 and a supervisor with restart-on-failure
did nothing. A worker that raised instead (any other status) was restarted forever while the port stayed bound.
So the service's factory exits with that status whatever went wrong (:func:`semdup.apps.http.app_from_env`),
and :func:`run_workers` runs the supervisor itself and looks at its workers' exit statuses afterwards::

    run_workers("semdup.apps.http:app_from_env", host="127.0.0.1", port=8080, workers=2)
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
from typing import Any

from semdup.core.errors import ConfigError
from semdup.reranker.reranker import Reranker
from semdup.reranker.settings import usable_cpus
from semdup.service.settings import ServiceSettings

__all__ = ["load_reranker", "preflight", "run_workers", "STARTUP_FAILURE", "PROBE_THREADS"]

logger = logging.getLogger(__name__)

STARTUP_FAILURE = 3  # uvicorn.config.STARTUP_FAILURE: "this worker cannot start, do not restart it"
PROBE_THREADS = 2  # /readyz's own threads (semdup.service.routers.probes), each with a pooled connection


def load_reranker(settings: ServiceSettings) -> Reranker:
    """The reranker a worker process serves with: the bundle read and verified (file hashes, manifest, the
    onnxruntime session and its cross-checks), its calibration, and a client that connects on first use (the
    service starts while the cluster is down). ``semdup serve`` runs this once before starting any worker, so a
    broken bundle is one error line instead of workers that die one after the other.

    Raises:
        BundleError: a missing, changed or inconsistent bundle file. ConfigError: a setting the bundle cannot
            serve (learned-sparse candidates without term weights, k-NN without a dense encoder).
    """
    from semdup.opensearch_io.clients import connect

    # one pooled connection per request thread, and the probes' own
    client = connect(settings.opensearch, check=False, pool_maxsize=settings.threads + PROBE_THREADS)
    try:
        return Reranker.from_bundle(
            settings.bundle,
            client,
            settings.index,
            settings.reranker,
            calibration=settings.calibration,
            # each query's encoding on both cores, not more than the worker may use (semdup.reranker.encoding)
            intra_op_threads=min(settings.onnx_threads, usable_cpus()) if settings.onnx_threads else None,
        )
    except ValueError as exc:  # the settings ask for a candidate path this bundle has no model for
        raise ConfigError(f"bundle {settings.bundle}: {exc}") from exc



def _load_version(settings: ServiceSettings) -> str:
    return load_reranker(settings).version


def preflight(settings: ServiceSettings, log_format: str) -> str:
    """Load and verify what a worker will serve (:func:`load_reranker`: the bundle's hashes,
    manifest, onnxruntime session and its probes, the calibration) in a spawned process, and return the model
    version; the process and its memory are gone when this returns.

    Raises:
        BundleError, ConfigError: what the load raised in that process (a broken bundle, a setting it cannot serve).
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from semdup.core.logs import configure_logging

    with ProcessPoolExecutor(
        max_workers=1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=configure_logging,
        initargs=(logging.INFO if log_format == "json" else logging.WARNING, log_format),
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
