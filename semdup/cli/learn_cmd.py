"""``semdup learn``: a site's own duplicates in, a candidate bundle and the gate's decision out.

Parses, calls :func:`semdup.learn.learn_run.learn_from` (and, with ``--promote``, ``semdup upgrade``), prints.
"""

from __future__ import annotations

import json
import time
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


_NAMES = {"encoder": "the learned encoder alone", "carried": "the learned encoder in the bundle to beat's fusion",
          "hybrid": "the learned hybrid (a fusion fitted on the fold models)"}


def _summary(run: Any) -> list[str]:
    o = run.outcome
    f, d = o.figures, o.decision
    lines = [f"labels: {o.source.line()}", f"folds: {o.folds.line()}",
             *(f"fold {r.index + 1}: {r.summary.line()}" + (" (reused: the work folder held it)" if r.reused else "")
               for r in o.fold_runs)]
    if o.passes is not None:
        lines.append(o.passes.line())
    if o.stopped and o.final is None:
        lines += _stopped_in_folds(o)
    else:
        metric = d.metric
        lines += [
            f"out-of-fold {metric} over {d.test.n} queries: bundle to beat ({o.compared_with}) {f['current']:.2f}; "
            f"learned encoder alone {f['encoder']:.2f}; in the bundle to beat's fusion {f['carried']:.2f}; learned "
            f"hybrid {f['hybrid']:.2f}; untrained encoder alone {f['base_dense']:.2f}",
            *(f"  fold {p['fold'] + 1} ({p['queries']} queries): bundle to beat {p['current']:.2f}, encoder "
              f"{p['encoder']:.2f}, carried {p['carried']:.2f}, hybrid {p['hybrid']:.2f}" for p in o.per_fold),
            *(f"  {name} vs the encoder alone: {t.mean_difference:+.2f} (95% CI {t.ci_low:+.2f}..{t.ci_high:+.2f}), "
              f"p = {t.p_value:.4f}" for name, t in o.choices.items()),
            f"candidate: {_NAMES[o.chosen]} (a fusion replaces the encoder alone only at p < {d.alpha:g} with its 95% "
            f"interval above 0); fusion {json.dumps(o.fusion)}",
            f"gate ({d.rule()}): p = {d.test.p_value:.4f} on {d.test.n} queries; {d.line()}",
        ]
    if o.candidate_dir is not None:
        lines.append(f"final model: {o.final.line()}")
        lines.append(f"candidate written: {o.candidate_dir} ({o.version})")
    elif o.stopped == "final model":
        lines.append(f"final model: {o.final.line()}")
        lines.append("stopped by the budget in the final model: the gate accepts the candidate, but it is written "
                     "only when the final model is trained; run the same command again to finish (about "
                     f"{o.minutes_left:.0f} min more)")
    elif o.stopped:
        lines.append("nothing written: the run is not finished")
    else:
        lines.append("no candidate written: the gate kept the bundle it was compared with")
    lines.append(f"kept: {run.kept}" + (" (the candidate)" if o.candidate_dir is not None else ""))
    lines.append(f"phases on {o.device} (wall s / CPU s): " + ", ".join(
        f"{name} {w:.0f}/{c:.0f}" for name, (w, c) in o.phases.items()))
    lines.append(f"time: {run.wall_seconds / 60:.1f} min wall, {run.cpu_seconds / 60:.1f} min CPU (this process); "
                 f"load average {run.load[0]:.2f} -> {run.load[1]:.2f}")
    return lines


def _stopped_in_folds(o: Any) -> list[str]:
    """What a run the budget stopped in a fold model says: where, and the decision the finished folds support."""
    d, f = o.decision, o.figures
    head = (f"stopped by the budget in {o.stopped} (every step saved); run the same command again to go on (about "
            f"{o.minutes_left:.0f} min more at this pace)")
    if d is None:
        return [head, "the decision it could make now: none (no fold model finished, so no query is judged yet); "
                      "the bundle in service stays"]
    return [head, f"the decision it could make now, on the {d.test.n} queries of the folds finished (the learned "
                  f"encoder alone {f['encoder']:.2f} against the bundle to beat {f['current']:.2f}): {d.line()}; "
                  f"nothing is written until the run finishes"]


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
@click.option("--budget", help="Wall-clock limit for this call (30m, 1h, 900s; default none). When it runs out, "
                               "training stops at a step, everything is saved, the run prints the decision the work "
                               "done so far supports and about how long the rest takes, and the same command goes "
                               "on.")
@click.option("--base", "current", type=click.Path(exists=True, path_type=Path),
              help="The bundle to beat (the one the site runs). Default: the untrained default, fitted here on "
                   "the labelled queries and written to <work>/untrained-default.")
@click.option("--base-encoder", type=click.Choice(["minilm", "mpnet"]), default="minilm", show_default=True,
              help="The encoder to fine-tune (mpnet: more accurate, about 4x the CPU).")
@click.option("--base-bundle", type=click.Path(path_type=Path),
              help="That encoder's bundle (default artifacts/bundles/NAME; exported there with torch when absent).")
@click.option("--epochs", type=float, help="The most passes over the training groups without --budget (default: "
                                          "the preset's, 2 for minilm; with --budget, as many as fit, at most 4). "
                                          "The fold models are scored after each pass and the final model trains "
                                          "the passes best out of fold.")
@click.option("--seed", type=int, help="Order, dropout and sampling seed (default 0).")
@click.option("--promote", is_flag=True,
              help="If the gate accepts the candidate, move the site (--index) to it with `semdup upgrade`.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="Where to train: auto takes a CUDA GPU when torch sees one (bf16 mixed precision there).")
@click.option("--folds", type=click.IntRange(2, 20),
              help="K: one model per fold, each judged on the fold it never saw (default 5 on a GPU, 2 on a CPU).")
@click.option("--threads", type=click.IntRange(1, 256), default=2, show_default=True, help="CPU threads for training.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@click.option("--quiet", is_flag=True, help="No progress lines on stderr (each phase, and every half minute of "
                                            "training).")
@click.pass_context
def learn(ctx: click.Context, data: str | None, duplicate_field: str | None, index: str | None, title_field: str,
          body_field: str, out_dir: Path, work_dir: Path | None, budget: str | None, current: Path | None,
          base_encoder: str, base_bundle: Path | None, epochs: float | None, seed: int | None, promote: bool,
          device: str, folds: int | None, threads: int, as_json: bool, quiet: bool) -> None:
    """Learn from the site's own duplicates and keep the result only if it beats the bundle it would replace.

    Cuts every labelled query into K folds by what separates future posts from past ones where the data says it
    (link dates, question dates, author, source file, first tag; else duplicate cluster: the rule is printed)
    and fine-tunes one model per fold without it (in-batch softmax, each query's known duplicates masked out),
    so every query is judged by a model that never saw it. On those out-of-fold scores it chooses among the
    learned encoder alone, the learned encoder inside the bundle to beat's own fusion, and a refitted hybrid (a
    fusion only if it beats the encoder alone at p < 0.05 with its 95% interval above zero), and compares the
    choice with the bundle to beat query by query (a paired randomisation test; accepted only at p < 0.05 with
    the gain's 95% interval above zero: where learning does not clearly help, the current bundle stays). Only
    then is the final model trained on all the labels, exported through the verified bundle path and written
    to --out. Checkpoints are kept: the same command again resumes. The bundled sets' test sides are never read.

    Moderators' verdicts: export them with `semdup verdicts --index SITE --out v.jsonl` and learn with
    `--data v.jsonl` (they are not merged with another source in one run).

    \b
    Example:
      semdup learn --data semeval --out artifacts/learned/semeval
      semdup eval semeval --set test --method bundle:artifacts/learned/semeval
      semdup learn --data /dumps/travel.stackexchange.com --out learned/travel --device cuda --budget 1h
      semdup learn --index site-posts --duplicate-field duplicate_of --out learned/site --promote
    """
    if (data is None) == (duplicate_field is None):
        raise click.UsageError("give either --data or --duplicate-field (with --index)")
    if duplicate_field is not None and not index:
        raise click.UsageError("--duplicate-field reads the site's index: give --index too")
    if promote and not index:
        raise click.UsageError("--promote upgrades a site's index: give --index")
    minutes = None if budget is None else _minutes(budget)
    if minutes is not None and minutes <= 0:
        raise click.BadParameter("the budget must be positive", param_hint="--budget")
    from semdup.learn.learn_run import learn_from, recipe

    client = None
    if duplicate_field is not None:  # --promote connects through `semdup upgrade` itself
        from semdup.cli import edge

        client = edge.client()
    t0 = time.monotonic()

    def tell(line: str) -> None:
        click.echo(f"[{(time.monotonic() - t0) / 60:5.1f} min] {line}", err=True)

    run = learn_from(data, out_dir, budget_minutes=minutes, settings=recipe(base_encoder, epochs=epochs, seed=seed),
                     folds=folds, device=device,
                     base_bundle=base_bundle, current_bundle=current, work_dir=work_dir, client=client, index=index,
                     duplicate_field=duplicate_field, title_field=title_field, body_field=body_field, threads=threads,
                     report=None if quiet else tell)
    if as_json:
        click.echo(json.dumps(run.to_json(), indent=2))
    else:
        for line in _summary(run):
            click.echo(line)
    if promote:
        if run.outcome.candidate_dir is None:
            why = run.outcome.decision.reason if run.outcome.decision is not None else "no decision yet"
            if run.outcome.stopped:
                why = f"the run stopped in {run.outcome.stopped}"
            click.echo(f"--promote: not promoted ({why}); {index} keeps its bundle")
            return
        from semdup.cli.upgrade_cmd import upgrade

        click.echo(f"$ semdup upgrade --alias {index} --bundle {run.outcome.candidate_dir}")
        ctx.invoke(upgrade, index=index, bundle=str(run.outcome.candidate_dir), fields="same", batch_size=64,
                   max_rounds=20, remove_old=False, yes=False)
