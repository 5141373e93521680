"""RCNN body→title pre-training (Lei et al. 2016, §4.2): the command behind the README's pre-training row.

Research script, not installed: it parses options and calls :func:`experiments.rcnn_pretraining.pretrain_rcnn`
(or :func:`~experiments.rcnn_pretraining.evaluate_without_finetuning` with ``--evaluate``), then prints the
figures as JSON. Run from the repository root::

    python -m experiments.pretrain_rcnn --out artifacts/scqa_rcnn/rcnn-pretrained.pt --minutes 8
    semdup train --arch rcnn --data semeval --out artifacts/rcnn-semeval-pt \\
        --set pretrained_encoder=artifacts/scqa_rcnn/rcnn-pretrained.pt
    python -m experiments.pretrain_rcnn --out artifacts/scqa_rcnn/rcnn-pretrained.pt --evaluate
"""

from __future__ import annotations

import json
import logging

import click

from semdup.core.errors import SemdupError
from semdup.data.paths import default_data_dir
from semdup.training.run_settings import parse_set

__all__ = ["main"]


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Output .pt file (read with --evaluate).")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Data sets (default: shared data).")
@click.option("--minutes", type=float, default=8.0, show_default=True, help="Wall-clock budget of the optimisation.")
@click.option("--max-steps", type=int, default=0, show_default=True, help="Cap on steps (0 = none).")
@click.option("--batch-size", type=int, default=32, show_default=True)
@click.option("--threads", type=int, default=2, show_default=True, help="torch threads.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="RCNN hyper-parameter, as for semdup train.")
@click.option(
    "--evaluate",
    is_flag=True,
    help="No training: SemEval dev figures of --out (an existing file) and of a random-weight RCNN.",
)
def main(
    out: str,
    data_dir: str | None,
    minutes: float,
    max_steps: int,
    batch_size: int,
    threads: int,
    seed: int,
    sets: tuple[str, ...],
    evaluate: bool,
) -> None:
    """Pre-train an RCNN encoder to write a question's title from its body; print the run's figures.

    \b
    Example:
      python -m experiments.pretrain_rcnn --out artifacts/scqa_rcnn/rcnn-pretrained.pt --minutes 8
    """
    try:
        hparams = parse_set(sets)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--set") from exc
    from experiments.rcnn_pretraining import PretrainSettings, evaluate_without_finetuning, pretrain_rcnn

    root = data_dir or default_data_dir()
    try:
        if evaluate:
            import torch

            torch.set_num_threads(threads)
            figures = {
                "pretrained": evaluate_without_finetuning(out, root),
                "random_weights": evaluate_without_finetuning(None, root),
            }
        else:
            settings = PretrainSettings(
                minutes=minutes, max_steps=max_steps, batch_size=batch_size, seed=seed, hparams=hparams
            )
            figures = pretrain_rcnn(settings, out, root, threads=threads)
    except SemdupError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(json.dumps(figures, indent=2))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    main()
