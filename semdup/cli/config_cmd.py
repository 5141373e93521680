"""``semdup config show`` (the effective settings, secrets masked, and where each came from) and ``semdup config
table`` (the table of every variable, ``docs/settings.md``)."""

from __future__ import annotations

import json
from pathlib import Path

import click

__all__ = ["config"]


@click.group("config")
def config() -> None:
    """The settings every semdup process reads: environment variables, then $SEMDUP_CONFIG, then defaults.

    \b
    Example:
      semdup config show                 # every setting, its value (secrets masked) and its source
      semdup config show --json
      semdup config table --out docs/settings.md
    """


@config.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: setting -> {value, source}.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False),
    help="YAML/TOML config file (default: $SEMDUP_CONFIG).",
)
def show(as_json: bool, config_file: str | None) -> None:
    """Print the effective settings (secrets masked) and where each value came from (cli, env, file, default).

    \b
    Example:
      SEMDUP_OPENSEARCH_URL=http://127.0.0.1:9200 semdup config show
    """
    from semdup.apps.settings import environment, load_settings
    from semdup.apps.settings_report import explain

    settings = load_settings(config_file=config_file)
    rows = explain(settings, environment())
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    width = max(len(k) for k in rows)
    for path, row in rows.items():
        value = row["value"]
        shown = "-" if value is None else json.dumps(value) if not isinstance(value, str) else value
        click.echo(f"{path:<{width}}  {shown:<40}  {row['source']}")


@config.command("table")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write it here (default: print it).")
def table(out: Path | None) -> None:
    """Write the table of every SEMDUP_* variable (Markdown): its place in the settings, default and meaning.

    \b
    Example:
      semdup config table --out docs/settings.md
    """
    from semdup.apps.settings_report import settings_table

    text = settings_table()
    if out is None:
        click.echo(text, nl=False)
        return
    out.write_text(text, encoding="utf-8")
    click.echo(f"wrote {out}")
