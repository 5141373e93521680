"""``semdup broker start|stop|status``: the embedded local Redis broker."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click

from semdup.devstack.local_redis import LocalRedis

__all__ = ["broker"]

logger = logging.getLogger(__name__)

_data_option = click.option(
    "--data",
    "state_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="State folder (append-only file, log, pid). Default: $SEMDUP_CACHE/state/redis "
    "(~/.cache/semdup/state/redis; /var/lib/semdup/state/redis for root).",
)


@click.group()
def broker() -> None:
    """Start, stop or check the embedded local Redis broker (Debian's redis-server).

    \b
    Example:
      export SEMDUP_BROKER_URL=$(semdup broker start)
      semdup broker status
      semdup broker stop
    """


@broker.command()
@click.option("--port", type=int, default=None, help="TCP port. Default: 6379 if free, else any free port.")
@_data_option
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait for PING.")
def start(port: int | None, state_dir: Path | None, timeout: float) -> None:
    """Start Redis detached with append-only persistence (or find it running) and print its URL.

    \b
    Example:
      semdup broker start --port 6390
    """
    node = LocalRedis(state_dir=state_dir, port=port)
    running = node.url
    url = running or node.start(timeout=timeout)
    click.echo(f"Redis {'already running' if running else 'started'} at {url}; log {node.log_file}", err=True)
    click.echo(url)


@broker.command()
@_data_option
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait before SIGKILL.")
def stop(state_dir: Path | None, timeout: float) -> None:
    """Stop Redis (it flushes the append-only file on SIGTERM).

    \b
    Example:
      semdup broker stop
    """
    click.echo("stopped" if LocalRedis(state_dir=state_dir).stop(timeout=timeout) else "not running")


@broker.command()
@_data_option
@click.option("--json", "as_json", is_flag=True, help="Print the full status as JSON.")
def status(state_dir: Path | None, as_json: bool) -> None:
    """Print the broker URL and whether it answers PING, or "not running" (exit 1).

    \b
    Example:
      semdup broker status --json
    """
    info = LocalRedis(state_dir=state_dir).status()
    if info is None:
        click.echo(json.dumps(None) if as_json else "not running")
        sys.exit(1)  # click.exceptions.Exit would be swallowed by semdup.cli.main's non-standalone mode
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(f"{info['url']} ping={'ok' if info['ping'] else 'failed'} appendonly={info.get('aof_enabled')}")
