"""The ``semdup`` command: one sub-command per part, loaded lazily so ``--help`` never imports torch.

Each part owns one module here (``opensearch_cmd``, ``eval_cmd`` ...) exposing a click command
or group under the name listed in ``_COMMANDS``. Runtime errors print "Error: ..." and exit 1;
usage errors exit 2 (click's convention). Every such line goes through :func:`semdup.core.logs.scrub` (no
password of a broker or cluster URL, no API key), and in JSON log mode it is one JSON record like every other
line on stderr. OpenSearch's errors arrive as semdup's already (the client raises them,
:mod:`semdup.opensearch_io.boundary`), so they too end as one ``Error:`` line, never a traceback.
"""

from __future__ import annotations

import importlib
import logging
import sys

import click

from semdup import __version__
from semdup.core.errors import SemdupError

__all__ = ["main", "cli"]

# command name -> (module under semdup.cli, attribute, one-line help shown by `semdup --help`)
_COMMANDS: dict[str, tuple[str, str, str]] = {
    "opensearch": ("opensearch_cmd", "opensearch", "Start, stop or check the embedded local OpenSearch."),
    "broker": ("broker_cmd", "broker", "Start, stop or check the embedded local Redis broker."),
    "eval": ("eval_cmd", "eval_group", "Measure a method on SemEval, Travel Stack Exchange or AskUbuntu pairs."),
    "train": ("train_cmd", "train", "Train an encoder (bow-cnn, cnn, scqa, rcnn, bow-minilm) on real data."),
    "export": ("export_cmd", "export", "Export a trained checkpoint to a verified ONNX model bundle."),
    "fit-default": ("fit_default_cmd", "fit_default_cmd", "Fit the hybrid default bundle on labelled duplicates."),
    "learn": ("learn_cmd", "learn", "Learn a bundle from a site's own duplicates; keep it only if it is better."),
    "worker": ("indexer_cmd", "worker", "Run a Celery indexing worker (ONNX encoder -> OpenSearch)."),
    "index-posts": ("indexer_cmd", "index_posts", "Enqueue posts from a file for indexing and wait for them."),
    "backfill": ("indexer_cmd", "backfill", "Fill semdup fields of posts indexed by an older or no model."),
    "enable": ("indexer_cmd", "enable", "Connect a site's existing index to semdup (a companion index)."),
    "watch": ("indexer_cmd", "watch", "Keep a connected site's index and its companion in step."),
    "upgrade": ("upgrade_cmd", "upgrade", "Move a connected site's index to a new model without downtime."),
    "rerank": ("reranker_cmd", "rerank", "Rank duplicate candidates for one post from the command line."),
    "serve": ("reranker_cmd", "serve", "Run the query-time reranking HTTP service."),
    "duplicates": ("duplicates_cmd", "duplicates", "List the likely duplicates flagged as posts were indexed."),
    "verdicts": ("verdicts_cmd", "verdicts", "Export the moderators' verdicts on flags as labelled JSONL pairs."),
    "calibrate": ("calibrate_cmd", "calibrate", "Fit the flagging threshold from verdicts (and duplicate links)."),
    "demo": ("demo_cmd", "demo", "Run the whole job on the embedded default and print the quality table."),
    "config": ("config_cmd", "config", "Show the effective settings and where each came from; write their table."),
    "pipeline": ("pipeline_cmd", "pipeline", "Put semdup's ranking inside the site's own _search (a search pipeline)."),
    "roles": ("roles_cmd", "roles", "Print the security plugin roles semdup's users need (least privilege)."),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in _COMMANDS:
            return None
        module, attr, _ = _COMMANDS[name]
        try:
            mod = importlib.import_module(f"semdup.cli.{module}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("semdup.cli"):
                return _unavailable(name)
            raise
        return getattr(mod, attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Short help from the table, so listing commands imports nothing heavy.
        with formatter.section("Commands"):
            formatter.write_dl([(n, _COMMANDS[n][2]) for n in self.list_commands(ctx)])


def _unavailable(name: str) -> click.Command:
    @click.command(name=name, help=_COMMANDS[name][2] + " (not built yet in this version)")
    def _cmd() -> None:
        raise click.ClickException(f"'semdup {name}' is not available in this version of semdup")

    return _cmd


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="semdup")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    help="Log lines as text, or one JSON object per line with secrets scrubbed (default: $SEMDUP_LOG_FORMAT, "
    "else text). Applies to every command, the workers and the HTTP service included.",
)
def cli(verbose: int, log_format: str | None) -> None:
    """semdup: semantic duplicate-question detection for OpenSearch clusters.

    \b
    Typical flow on the embedded default (no Docker needed):
      semdup opensearch start            # local OpenSearch from Maven Central
      semdup eval semeval --method bm25  # lexical baseline, official SemEval measure
      semdup train --arch bow-cnn ...    # train an encoder
      semdup export --checkpoint DIR --out BUNDLE
      semdup worker / semdup index-posts # Celery indexing into OpenSearch
      semdup rerank / semdup serve       # query-time reranking
    """
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    from semdup.apps.settings import log_format_setting
    from semdup.core.logs import configure_logging

    # text, or one JSON object per line (--log-format / SEMDUP_LOG_FORMAT); a worker's task lines formatted alike
    worker = click.get_current_context().invoked_subcommand == "worker"
    configure_logging(level, log_format or log_format_setting(), celery=True if worker else None)
    if verbose == 0:
        # The client logs every failed attempt with a traceback; semdup reports the failure itself, in one line.
        for noisy in ("opensearch", "urllib3", "celery.utils.functional"):
            logging.getLogger(noisy).setLevel(logging.ERROR)


def _json_mode() -> bool:
    """Whether stderr carries JSON records: as configured, or as asked where the error came before that."""
    from semdup.apps.settings import log_format_setting
    from semdup.core.errors import ConfigError
    from semdup.core.logs import active_format

    fmt = active_format()
    if fmt is None:
        try:
            fmt = log_format_setting()
        except ConfigError:
            return False
    return fmt == "json"


def _fail(message: str, code: int, usage: click.ClickException | None = None) -> None:
    """Print one scrubbed ``Error:`` line (a JSON record in JSON mode) and exit with ``code``."""
    from semdup.core.logs import configure_logging, scrub

    message = scrub(message)
    if _json_mode():
        from semdup.core.logs import active_format

        if active_format() != "json":  # failed before the group set logging up (a usage error)
            configure_logging(logging.WARNING, "json")
        logging.getLogger("semdup.cli").error("Error: %s", message, extra={"exit_code": code})
    elif usage is not None:
        formatted = usage.format_message
        usage.format_message = lambda: scrub(formatted())  # type: ignore[method-assign]
        usage.show()  # click's usage line and --help hint around the message
    else:
        click.echo(f"Error: {message}", err=True)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: semdup errors become one "Error: ..." line and exit 1."""
    try:
        # standalone_mode=False makes click return ctx.exit(code)'s code instead of raising it
        rv = cli.main(args=argv, prog_name="semdup", standalone_mode=False)
        if isinstance(rv, int) and not isinstance(rv, bool):
            sys.exit(rv)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        _fail(exc.format_message(), exc.exit_code, usage=exc)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except SemdupError as exc:
        _fail(str(exc), 1)
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)
