"""``semdup learn``: a site's own duplicates in, a candidate bundle and the gate's decision out.

Parses, calls :func:`semdup.export.learn_run.learn_from` (and, with ``--promote``, ``semdup upgrade``), prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

__all__ = ["learn"]


def _minutes(text: str) -> float:
    """``30m``, ``1h``, ``90s`` or a bare number of minutes."""
    t = text.strip().lower()
    try:
        if t.endswith("h"):
            return float(t[:-1]) * 60.0
        if t.endswith("s"):
            return float(t[:-1]) / 60.0
        return float(t[:-1] if t.endswith("m") else t)
    except ValueError:
        raise click.BadParameter(f"{text!r} is no duration; write e.g. 30m, 1.5h or 900s") from None


def _summary(run: Any) -> list[str]:
    o = run.outcome
    h = o.held_out_figures
    metric = o.decision.metric
    t = o.decision.test
    lines = [
        f"labels: {o.source.line()}",
        f"split: {o.split.line()}",
        f"training: {o.summary.line()}" + (" (reused: this work folder held the finished run)" if o.reused else ""),
        f"held-out {metric}: bundle to beat ({o.compared_with}) {h['current']:.2f}; candidate {h['candidate']:.2f} "
        f"(fusion cross-fitted); encoders alone: base {h['base_dense']:.2f} -> learned {h['learned_dense']:.2f}",
        f"gate (paired randomisation test, one-sided, alpha {o.decision.alpha:g}): p = {t.p_value:.4f}; "
        f"{o.decision.line()}",
        f"candidate written: {o.candidate_dir} ({o.version}); fusion {json.dumps(o.fusion)}",
        f"kept: {run.kept}" + (" (the candidate)" if o.decision.accept else " (the candidate is not better enough)"),
        f"time: {run.wall_seconds / 60:.1f} min wall, {run.cpu_seconds / 60:.1f} min CPU (this process); load "
        f"average {run.load[0]:.2f} -> {run.load[1]:.2f}; phases (wall s): "
        + ", ".join(f"{k} {v:.0f}" for k, v in o.seconds.items()),
    ]
    return lines


@click.command("learn")
@click.option("--data", help="semeval, travel or askubuntu (the bundled sets, their own splits; test never read), "
                             "or a path: a Stack Exchange dump folder, SemEval .xml, a JSONL of labelled pairs (what "
                             "`semdup verdicts` writes) or of groups {query, duplicates, non_duplicates}.")
@click.option("--duplicate-field", help="Instead of --data: the field of the site's own documents that names the "
                                        "post a post duplicates (an id or a list of ids); needs --index.")
@click.option("--index", help="The site's index or alias: read for --duplicate-field, upgraded by --promote.")
@click.option("--title-field", default="title", show_default=True,
              help="With --duplicate-field on an index not connected by `semdup enable`: its title field.")
@click.option("--body-field", default="body", show_default=True, help="... and its body field.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True,
              help="The candidate bundle's folder (written and verified whatever the gate decides).")
@click.option("--work", "work_dir", type=click.Path(path_type=Path),
              help="Checkpoints and intermediate bundles (default: <out>.work). A rerun with the same folder resumes.")
@click.option("--budget", default="30m", show_default=True,
              help="Wall-clock time for the whole run (30m, 1h, 900s); training gets what the rest leaves.")
@click.option("--base", "current", type=click.Path(exists=True, path_type=Path),
              help="The bundle to beat (the one the site runs). Default: the untrained default, fitted here on "
                   "the training side and written to <work>/untrained-default.")
@click.option("--base-encoder", type=click.Choice(["minilm", "mpnet"]), default="minilm", show_default=True,
              help="The encoder to fine-tune (mpnet: more accurate, about 4x the CPU).")
@click.option("--base-bundle", type=click.Path(path_type=Path),
              help="That encoder's bundle (default artifacts/bundles/NAME; exported there with torch when absent).")
@click.option("--epochs", type=float, help="Passes over the training groups (default: the preset's, 2 for minilm).")
@click.option("--seed", type=int, help="Order, dropout and sampling seed (default 0).")
@click.option("--promote", is_flag=True,
              help="If the gate accepts the candidate, move the site (--index) to it with `semdup upgrade`.")
@click.option("--threads", type=click.IntRange(1, 256), default=2, show_default=True, help="CPU threads for training.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@click.pass_context
def learn(ctx: click.Context, data: str | None, duplicate_field: str | None, index: str | None, title_field: str,
          body_field: str, out_dir: Path, work_dir: Path | None, budget: str, current: Path | None, base_encoder: str,
          base_bundle: Path | None, epochs: float | None, seed: int | None, promote: bool, threads: int,
          as_json: bool) -> None:
    """Learn from the site's own duplicates and keep the result only if it beats the bundle it would replace.

    Fine-tunes the base encoder on the training side of your labels (in-batch softmax, each query's other known
    duplicates masked out), exports it through the verified bundle path, fits the hybrid's fusion on held-out
    queries, and compares it with the bundle to beat on those same queries, query by query (a paired
    randomisation test; accepted only at p < 0.05). The split is made for you: by time where links are dated,
    else by duplicate cluster, at least 200 held-out queries where the data has them (the bundled sets keep their
    own splits). Runs on CPU within --budget; checkpoints every few minutes, and the same command again resumes.

    Moderators' verdicts: export them with `semdup verdicts --index SITE --out v.jsonl` and learn with
    `--data v.jsonl` (they are not merged with another source in one run).

    \b
    Example:
      semdup learn --data semeval --out artifacts/learned/semeval --budget 30m
      semdup eval semeval --set test --method bundle:artifacts/learned/semeval
      semdup learn --data /dumps/travel.stackexchange.com --out learned/travel --budget 1h
      semdup learn --index site-posts --duplicate-field duplicate_of --out learned/site --promote
    """
    if (data is None) == (duplicate_field is None):
        raise click.UsageError("give either --data or --duplicate-field (with --index)")
    if duplicate_field is not None and not index:
        raise click.UsageError("--duplicate-field reads the site's index: give --index too")
    if promote and not index:
        raise click.UsageError("--promote upgrades a site's index: give --index")
    minutes = _minutes(budget)
    if minutes <= 0:
        raise click.BadParameter("the budget must be positive", param_hint="--budget")
    from semdup.export.learn_run import learn_from, recipe

    client = None
    if duplicate_field is not None:  # --promote connects through `semdup upgrade` itself
        from semdup.cli import edge

        client = edge.client()
    run = learn_from(data, out_dir, budget_minutes=minutes, settings=recipe(base_encoder, epochs=epochs, seed=seed),
                     base_bundle=base_bundle, current_bundle=current, work_dir=work_dir, client=client, index=index,
                     duplicate_field=duplicate_field, title_field=title_field, body_field=body_field, threads=threads)
    if as_json:
        click.echo(json.dumps({**run.outcome.to_json(), "kept": str(run.kept), "wall_seconds": run.wall_seconds,
                               "cpu_seconds_total": run.cpu_seconds, "load": list(run.load)}, indent=2))
    else:
        for line in _summary(run):
            click.echo(line)
    if promote:
        if not run.outcome.decision.accept:
            click.echo(f"--promote: not promoted ({run.outcome.decision.reason}); {index} keeps its bundle")
            return
        from semdup.cli.upgrade_cmd import upgrade

        click.echo(f"$ semdup upgrade --alias {index} --bundle {run.outcome.candidate_dir}")
        ctx.invoke(upgrade, index=index, bundle=str(run.outcome.candidate_dir), fields="same", batch_size=64,
                   max_rounds=20, remove_old=False, yes=False)
