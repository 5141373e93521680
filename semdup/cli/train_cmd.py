"""``semdup train``: train an encoder on one of the three real data sets and write a checkpoint."""

from __future__ import annotations

import json
import logging
from typing import Any

import click

from semdup.core.errors import ConfigError

__all__ = ["train"]

logger = logging.getLogger(__name__)

ARCH_CHOICES = ["bow-cnn", "cnn", "scqa", "rcnn", "minilm", "bow-minilm"]


def _parse_set(values: tuple[str, ...]) -> dict[str, Any]:
    from semdup.training.run_settings import parse_set

    try:
        return parse_set(values)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--set") from exc


def _parse_scales(text: str | None) -> tuple[float, ...] | None:
    """``"0,0.5,1"`` → (0.0, 0.5, 1.0); None stays None (the defaults apply)."""
    if text is None:
        return None
    try:
        scales = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise click.BadParameter(
            f"expected comma-separated numbers, got {text!r}", param_hint="--dense-scales"
        ) from exc
    if any(s < 0 for s in scales):
        raise click.BadParameter(f"scales must be >= 0, got {text!r}", param_hint="--dense-scales")
    return scales


@click.command(name="train")
@click.option("--arch", required=True, type=click.Choice(ARCH_CHOICES), help="Architecture to train.")
@click.option(
    "--data",
    "data_set",
    required=True,
    type=click.Choice(["semeval", "travel", "askubuntu"]),
    help="Real data set (its official train/dev/test protocol).",
)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Checkpoint directory.")
@click.option(
    "--data-dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Root of the shared data sets (default: SEMDUP_DATA_DIR, else shared/data beside the checkout).",
)
@click.option(
    "--train",
    "train_paths",
    multiple=True,
    type=click.Path(exists=True),
    help="Override training file(s) (semeval: JSONL/XML files; travel: dump dir; askubuntu: JSONL).",
)
@click.option("--dev", "dev_path", type=click.Path(exists=True), help="Override the dev file (semeval XML).")
@click.option("--test", "test_path", type=click.Path(exists=True), help="Override the test file.")
@click.option("--epochs", type=int, help="Maximum epochs (early stopping on dev).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of sampling, init and order.")
@click.option("--lr", type=float, help="Learning rate.")
@click.option("--optimizer", type=click.Choice(["adam", "sgd"]), help="Optimizer.")
@click.option("--batch-size", type=int, help="Groups or pairs per step.")
@click.option("--negatives", type=int, help="Negatives per positive (ranking losses).")
@click.option("--patience", type=int, help="Epochs without dev improvement before stopping.")
@click.option("--max-tokens", type=int, help="Tokens kept per post (title + body).")
@click.option("--min-df", type=int, help="Vocabulary minimum document frequency.")
@click.option("--max-steps", type=int, help="Cap on steps per epoch (quick runs).")
@click.option("--term-lr", type=float, help="Learning rate of the BOW term weights t (default: --lr).")
@click.option("--evals-per-epoch", type=int, help="Dev evaluations per epoch (2 = every half epoch).")
@click.option(
    "--dense-scales",
    help="BOW + dense models: comma-separated factors s; β_dense × s is chosen on dev at each evaluation "
    "(e.g. 0,0.25,0.5,1).",
)
@click.option(
    "--ema-decay",
    type=float,
    help="0 = off; in (0, 1): dev checks and the saved checkpoint use a moving average of the weights over "
    "about 1/(1-d) steps (e.g. 0.99).",
)
@click.option(
    "--fresh-negatives/--no-fresh-negatives",
    default=None,
    help="Travel ranking losses: draw the random negatives again every epoch (default: one draw up front).",
)
@click.option(
    "--lexical-negatives",
    default=None,
    type=int,
    help="Travel: BM25 top-k non-duplicates used as hard negatives (0 = none; default 30 or the dev-chosen one).",
)
@click.option(
    "--related-negatives/--no-related-negatives",
    default=None,
    help="Travel: related links (LinkTypeId=1) as negatives (default on, or the dev-chosen setting).",
)
@click.option(
    "--random-pair-negatives",
    default=None,
    type=int,
    help="Travel, pair losses (SCQA): random posts added as 0-pairs per positive beside the hard ones "
    "(default 0 or the dev-chosen one).",
)
@click.option(
    "--dev-only",
    is_flag=True,
    help="Tuning runs: evaluate dev only, never test (choose settings on dev; report test once).",
)
@click.option("--qa-pairs", is_flag=True,
              help="SemEval: add question-answer pairs from the training comments (SCQA's signal; pair losses).")
@click.option(
    "--threads",
    type=int,
    default=2,
    show_default=True,
    help="torch CPU threads. 1 is bit-reproducible run to run; with more, sums run in another order and the "
    "result can move a little (two 2-thread Travel runs: dev MAP 40.94 and 41.87).",
)
@click.option(
    "--loss",
    type=click.Choice(["in-batch"]),
    help="Replace the arch's loss: in-batch = softmax over every candidate of the batch (dense archs, e.g. minilm).",
)
@click.option(
    "--device",
    default="cpu",
    show_default=True,
    help="torch device to train on, e.g. cuda (the checkpoint is written from CPU tensors and loads anywhere).",
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Model hyper-parameter, e.g. --set word_vectors=none --set conv_units=200.",
)
def train(
    arch: str,
    data_set: str,
    out_dir: str,
    data_dir: str | None,
    train_paths: tuple[str, ...],
    dev_path: str | None,
    test_path: str | None,
    epochs: int | None,
    seed: int,
    lr: float | None,
    optimizer: str | None,
    batch_size: int | None,
    negatives: int | None,
    patience: int | None,
    max_tokens: int | None,
    min_df: int | None,
    max_steps: int | None,
    term_lr: float | None,
    evals_per_epoch: int | None,
    dense_scales: str | None,
    ema_decay: float | None,
    fresh_negatives: bool | None,
    lexical_negatives: int | None,
    related_negatives: bool | None,
    random_pair_negatives: int | None,
    dev_only: bool,
    qa_pairs: bool,
    threads: int,
    loss: str | None,
    device: str,
    sets: tuple[str, ...],
) -> None:
    """Train an encoder on real data; write config.json, vocab.json, model.pt and metrics.json to --out.

    Early stopping uses dev (SemEval: dev MAP; Travel: dev MAP; AskUbuntu: accuracy on a held-out
    20% slice of train). Dev and test figures of the best epoch are printed and saved.

    \b
    Example:
      semdup train --arch bow-cnn --data travel --out artifacts/bow-cnn-travel --epochs 8
      semdup train --arch cnn --data askubuntu --out artifacts/cnn-askubuntu --set word_vectors=glove
    """
    try:
        from semdup.training.recipes import DataPaths
        from semdup.training.run_settings import resolve_settings
        from semdup.training.trainer import train as run_training
    except ImportError as exc:
        raise ConfigError(f'training needs the training extras ({exc}); install: pip install "semdup[train]"') from exc
    from semdup.data.paths import default_data_dir

    given = {
        "epochs": epochs,
        "seed": seed,
        "lr": lr,
        "optimizer": optimizer,
        "batch_size": batch_size,
        "negatives": negatives,
        "patience": patience,
        "max_tokens": max_tokens,
        "min_df": min_df,
        "max_steps_per_epoch": max_steps,
        "threads": threads,
        "device": device,
        "loss": loss,
        "term_lr": term_lr,
        "evals_per_epoch": evals_per_epoch,
        "dense_scales": _parse_scales(dense_scales),
        "ema_decay": ema_decay,
        "fresh_negatives": fresh_negatives,
        "lexical_negatives": lexical_negatives,
        "related_negatives": related_negatives,
        "random_pair_negatives": random_pair_negatives,
    }
    run = resolve_settings(arch, data_set, given, hparams=_parse_set(sets))  # arch, then dev-chosen, then these
    paths = DataPaths.defaults(data_set, data_dir or default_data_dir()).override(train_paths, dev_path, test_path)
    recipe = run.build_recipe(paths, qa_pairs=qa_pairs, report_test=not dev_only)
    result = run_training(
        run.settings,
        recipe.data,
        recipe.evaluate_dev,
        recipe.dev_metric,
        out_dir,
        recipe.evaluate_final,
        recipe.extra_config,
    )
    click.echo(
        f"checkpoint: {result.out_dir} (best epoch {result.best_epoch}, dev {recipe.dev_metric} {result.best_dev:.2f})"
    )
    for part in ("train", "dev", "test"):
        if result.metrics.get(part):
            figures = {k: round(v, 2) for k, v in result.metrics[part].items() if isinstance(v, float)}
            click.echo(f"{part}: {json.dumps(figures)}")
    if result.metrics.get("threshold") is not None:
        click.echo(f"threshold: {result.metrics['threshold']:.4f} ({result.metrics.get('threshold_source', '')})")
