"""What ``semdup index-posts --input`` says about its input: the posts read, each record skipped, and how it ends.

Kept apart from :mod:`semdup.cli.indexer_cmd` (which waits for the job and prints its result): this module only
reads the input through :func:`semdup.data.posts_input.read_post_input` and reports on it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

__all__ = ["read_input", "end_input"]

_SKIPPED_SHOWN = 20  # skipped input records listed one by one; the rest are counted (and logged with -v)


def read_input(path: Path) -> Any:
    """Read ``--input`` record by record and print how many posts were read and each record skipped (the first
    20): one bad line costs that line only. Exits 1 before anything is sent when no record can be indexed."""
    from semdup.data.posts_input import read_post_input

    read = read_post_input(path)
    repeats = f", {read.repeats} exact repeats kept once" if read.repeats else ""
    skipped = f", skipped {read.units(len(read.skipped))}:" if read.skipped else ""
    click.echo(f"read {len(read.posts)} posts from {path} ({read.fmt}){repeats}{skipped}")
    for record in read.skipped[:_SKIPPED_SHOWN]:
        click.echo(f"  {record}")
    if len(read.skipped) > _SKIPPED_SHOWN:
        click.echo(f"  ... and {len(read.skipped) - _SKIPPED_SHOWN} more (`semdup -v index-posts ...` logs each)")
    if not read.posts:
        raise click.ClickException(
            f"none of the {read.units(len(read.skipped))} of {path} can be indexed (listed above); nothing was "
            "enqueued: fix them and run the command again"
        )
    return read


def end_input(read: Any, verb: str, finish: Callable[[], None]) -> None:
    """End a run: ``finish`` (the job's own ending, which exits 1 for parked or unfinished posts), then exit 1 as
    well when records of ``--input`` were skipped (``read`` None: the run read no input), saying so in the same
    ``Error:`` line.

    Exit 1, like a parked post: a skipped record is a post that was not written, so a script must notice, and the
    message says that the other posts were ``verb`` (written or enqueued), so nobody runs the whole file again
    for fear of a half-done job (running it again is harmless all the same: every write is idempotent).
    """
    if read is None or not read.skipped:
        finish()
        return

    def note(done: str) -> str:
        return (
            f"{read.units(len(read.skipped))} of {read.path} skipped (listed above) and not indexed; the other "
            f"{len(read.posts)} posts were {done}. Fix those records and index them again (writing a post twice is "
            "harmless)"
        )

    try:
        finish()
    except click.ClickException as exc:
        exc.message = f"{exc.message}. Also {note('enqueued')}"
        raise
    raise click.ClickException(note(verb))
