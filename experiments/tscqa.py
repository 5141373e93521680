"""T-SCQA (Das et al. 2016, §6): tune α of α·cos + (1 − α)·BM25 on dev for a trained SCQA checkpoint.

Research script, not installed: it calls :func:`experiments.tscqa_fit.tune_alpha` (the dev curve over
α = 0.0 .. 1.0, test at the dev-best α and at the paper's 0.8), prints the result as JSON and, with
``--out``, writes a ``t-scqa`` checkpoint (:func:`~experiments.tscqa_fit.write_tscqa_checkpoint`) that
``semdup export`` turns into a bundle. Run from the repository root::

    python -m experiments.tscqa --checkpoint artifacts/scqa_rcnn/scqa-semeval --data semeval \\
        --out artifacts/scqa_rcnn/t-scqa-semeval
"""

from __future__ import annotations

import json
import logging

import click

from semdup.core.errors import SemdupError
from semdup.data.paths import default_data_dir

__all__ = ["main"]


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--checkpoint", required=True, type=click.Path(file_okay=False), help="A trained scqa checkpoint.")
@click.option("--data", "data_set", required=True, type=click.Choice(["semeval", "travel"]))
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Data sets (default: shared data).")
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Write a t-scqa checkpoint here.")
def main(checkpoint: str, data_set: str, data_dir: str | None, out: str | None) -> None:
    """Tune T-SCQA's α on dev, report dev and test, and optionally write the t-scqa checkpoint.

    \b
    Example:
      python -m experiments.tscqa --checkpoint artifacts/scqa-semeval --data semeval --out artifacts/t-scqa-semeval
    """
    from experiments.tscqa_fit import tune_alpha, write_tscqa_checkpoint

    try:
        result = tune_alpha(checkpoint, data_set, data_dir or default_data_dir())
        if out:
            write_tscqa_checkpoint(checkpoint, out, result)
    except SemdupError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(json.dumps(result, indent=2))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    main()
