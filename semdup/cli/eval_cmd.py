"""``semdup eval``: quality on the real data sets with their official measures."""

from __future__ import annotations

import json
from pathlib import Path

import click

from semdup.evaluation.methods import METHOD_HELP, Method, parse_method
from semdup.index_format.schema import LEXICAL_MODELS

__all__ = ["eval_group"]


def _methods(values: tuple[str, ...]) -> list[Method]:
    names: list[str] = []
    for v in values:
        for part in v.split(","):
            names.extend(LEXICAL_MODELS if part == "lexical" else [part])
    try:
        return [parse_method(n) for n in names]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--method") from exc


def _client(url: str | None, needed: bool):
    if not needed:
        return None
    from semdup.cli.edge import client

    # --opensearch wins over the environment's URL; credentials and TLS settings still come from it
    return client(url)


def _print_table(rows: list[tuple[str, dict[str, float]]], columns: list[str], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({name: m for name, m in rows}, indent=2))
        return
    width = max(12, *(len(n) for n, _ in rows))
    click.echo(f"{'method':<{width}}  " + "  ".join(f"{c:>7}" for c in columns))
    for name, m in rows:
        click.echo(f"{name:<{width}}  " + "  ".join(f"{m[c]:7.2f}" for c in columns))


@click.group("eval")
def eval_group() -> None:
    """Measure a method on a real data set with its official measure."""


@eval_group.command("semeval")
@click.option("--set", "set_name", type=click.Choice(["dev", "test"]),
              help="A shipped SemEval-2016 set (or --xml/--relevancy).")
@click.option("--xml", type=click.Path(dir_okay=False, path_type=Path), help="SemEval XML (e.g. the test input).")
@click.option("--relevancy", type=click.Path(dir_okay=False, path_type=Path), help="Gold .relevancy file.")
@click.option("--method", "methods", multiple=True, required=True,
              help=f"{METHOD_HELP}; 'lexical' = all six; repeatable.")
@click.option("--mode", type=click.Choice(["rerank", "retrieve"]), default="rerank", show_default=True,
              help="rerank: the 10 candidates only; retrieve: from all of the set's related questions.")
@click.option("--fields", type=click.Choice(["text", "title"]), default="text", show_default=True,
              help="Lexical matching on title + body, or on titles only.")
@click.option("--k", type=int, default=20, show_default=True,
              help="Candidates retrieved per question in retrieve mode.")
@click.option("--pred", type=click.Path(path_type=Path),
              help="Write official-format predictions here (one method: a file; several: a directory).")
@click.option("--opensearch", "url", help="OpenSearch URL (default: settings / the embedded node).")
@click.option("--keep-index", is_flag=True, help="Keep the evaluation index for inspection.")
@click.option("--json", "as_json", is_flag=True, help="Print metrics as JSON.")
def semeval(set_name, xml, relevancy, methods, mode, fields, k, pred, url, keep_index, as_json) -> None:
    """Rank SemEval-2016 Task 3 subtask B candidates; print MAP, MRR, P@1 (official rules).

    \b
    Example:
      semdup eval semeval --set test --method lexical
      semdup eval semeval --xml SemEval2016-Task3-CQA-QL-test-input.xml \\
          --relevancy SemEval2016-Task3-CQA-QL-test.xml.subtaskB.relevancy --method bm25 --mode retrieve --pred bm25.pred
    """  # noqa: E501 (the help example is kept as printed)
    from semdup.data import load_semeval_xml
    from semdup.data.paths import semeval_files
    from semdup.data.run_files import top_half_scores, write_semeval_pred
    from semdup.evaluation.semeval_eval import run_semeval

    if set_name:
        xml, relevancy = semeval_files(set_name)
    if xml is None or relevancy is None:
        raise click.UsageError("give --set dev|test, or both --xml and --relevancy")
    ms = _methods(methods)
    sem = load_semeval_xml(xml, relevancy, name=set_name or xml.stem)
    needs_os = any(m.lexical for m in ms) or mode == "retrieve" or url is not None
    runs = run_semeval(sem, ms, client=_client(url, needs_os), mode=mode, variant=fields, k=k, keep_index=keep_index)
    if pred:
        gold = sem.gold()
        for run in runs:
            path = pred if len(runs) == 1 else pred / f"{run.method.replace(':', '_').replace('/', '_')}.{mode}.pred"
            path.parent.mkdir(parents=True, exist_ok=True)
            # lexical methods have no duplicate threshold: true = in the top half of the question's candidates
            threshold = run.threshold
            if threshold is None:
                write_semeval_pred(path, top_half_scores(run.predictions), gold, threshold=0.5)
            else:
                write_semeval_pred(path, run.predictions, gold, threshold=threshold)
    _print_table([(f"{r.method} ({mode})", r.metrics) for r in runs], ["MAP", "MRR", "P@1"], as_json)


@eval_group.command("stackexchange")
@click.option("--dump", type=click.Path(file_okay=False, path_type=Path),
              help="Dump folder with Posts.xml, PostLinks.xml, splits.tsv (default: the shipped Travel dump).")
@click.option("--split", type=click.Choice(["train", "dev", "test"]), default="test", show_default=True)
@click.option("--method", "methods", multiple=True, required=True,
              help=f"{METHOD_HELP}; 'lexical' = all six; repeatable.")
@click.option("--fields", type=click.Choice(["text", "title"]), default="text", show_default=True)
@click.option("--run", "run_out", type=click.Path(path_type=Path),
              help="Write a TREC run file (QID Q0 DOCID RANK SCORE TAG, top 100); several methods: a directory.")
@click.option("--opensearch", "url", help="OpenSearch URL (default: settings / the embedded node).")
@click.option("--keep-index", is_flag=True)
@click.option("--offline", is_flag=True,
              help="Score checkpoints and bundles exhaustively against every post, without OpenSearch "
                   "(compares a bundle with its checkpoint; default for bundles: through the reranker).")
@click.option("--json", "as_json", is_flag=True)
def stackexchange(dump, split, methods, fields, run_out, url, keep_index, offline, as_json) -> None:
    """Retrieve duplicates from a whole Stack Exchange community; print Accuracy@1/5/10, MAP, MRR.

    \b
    Example:
      semdup eval stackexchange --split test --method lexical
      semdup eval stackexchange --dump ../shared/data/travel-stackexchange --split dev --method bm25 --run bm25.run
      semdup eval stackexchange --offline --method checkpoint:artifacts/bow-cnn-travel --method bundle:bundles/b.tar.gz
    """
    from semdup.data import load_stackexchange_dump
    from semdup.data.paths import travel_dir
    from semdup.data.run_files import write_trec_run
    from semdup.evaluation.stackexchange_eval import run_stackexchange

    ms = _methods(methods)
    if offline and any(m.lexical for m in ms):
        raise click.UsageError("--offline scores trained models only; lexical methods need OpenSearch")
    d = load_stackexchange_dump(dump or travel_dir())
    needs_os = not offline and any(m.lexical or m.kind == "bundle" for m in ms)
    runs = run_stackexchange(d, split, ms, client=_client(url, needs_os), variant=fields, keep_index=keep_index)
    if run_out:
        for run in runs:
            name = f"{run.method.replace(':', '_').replace('/', '_')}.{split}.run"
            path = run_out if len(runs) == 1 else run_out / name
            path.parent.mkdir(parents=True, exist_ok=True)
            write_trec_run(path, run.ranked)
    _print_table(
        [(f"{r.method} ({split})", r.metrics) for r in runs], ["Acc@1", "Acc@5", "Acc@10", "MAP", "MRR"], as_json
    )


@eval_group.command("decisions")
@click.option("--method", "method_text", required=True, help="bundle:PATH (the model the reranking service serves).")
@click.option("--data", type=click.Choice(["semeval", "askubuntu"]), default="semeval", show_default=True,
              help="semeval: threshold on dev, P/R/F1/Acc on test; askubuntu: threshold on train, Acc on test.")
@click.option("--save/--no-save", default=True, show_default=True,
              help="Write the Platt calibration and threshold to <bundle>.calibration.json (keyed by version).")
@click.option("--criterion", type=click.Choice(["accuracy", "f1"]), default="accuracy", show_default=True,
              help="What the threshold maximises on dev/train.")
@click.option("--opensearch", "url", help="OpenSearch URL (default: settings / the embedded node).")
@click.option("--json", "as_json", is_flag=True)
def decisions(method_text, data, save, criterion, url, as_json) -> None:
    """Duplicate decisions through the reranker: threshold and Platt calibration fitted on dev/train, test figures.

    \b
    Example:
      semdup eval decisions --method bundle:artifacts/bundles/t-scqa-semeval --data semeval
      semdup eval decisions --method bundle:artifacts/bundles/bow-cnn-askubuntu --data askubuntu
    """
    from semdup.data import load_pairs_jsonl, load_semeval_xml
    from semdup.data.paths import askubuntu_files, data_dir, semeval_files
    from semdup.data.run_files import load_official_results
    from semdup.evaluation.through_reranker import askubuntu_decisions, semeval_decisions

    method = parse_method(method_text)
    if method.kind != "bundle":
        raise click.BadParameter(
            "decisions are measured for exported bundles: give bundle:PATH", param_hint="--method"
        )
    client = _client(url, True)
    if data == "semeval":
        dev = load_semeval_xml(*semeval_files("dev"), name="dev")
        test = load_semeval_xml(*semeval_files("test"), name="test")
        run = semeval_decisions(client, method.path, dev, test, save=save, criterion=criterion)
        official = load_official_results(data_dir() / "semeval2016-task3" / "official" / "results_subtask_B_2016.tab")
        reference = {"best F1 (2016)": max(r.F1 for r in official), "best Acc (2016)": max(r.Acc for r in official)}
    else:
        train_path, test_path = askubuntu_files()
        run = askubuntu_decisions(client, method.path, load_pairs_jsonl(train_path), load_pairs_jsonl(test_path),
                                  save=save, criterion=criterion)
        reference = {}
    out = {"data": data, "model": run.model, "threshold": run.threshold, "threshold_chosen_on_accuracy":
           run.dev_accuracy, "test": run.test, "platt": {"a": run.calibration.a, "b": run.calibration.b},
           "calibration_file": str(run.calibration_file) if run.calibration_file else None, "reference": reference}
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    where = "dev" if data == "semeval" else "train"
    click.echo(f"{run.model}: threshold {run.threshold:.4f} chosen by {criterion} on {where} "
               f"(accuracy there {run.dev_accuracy:.2f})")
    t = run.test
    click.echo(f"test  P {t['P']:.2f}  R {t['R']:.2f}  F1 {t['F1']:.2f}  Acc {t['Acc']:.2f}  (n={t['n']})")
    for name, value in reference.items():
        click.echo(f"reference {name}: {value:.2f}")
    if run.calibration_file:
        click.echo(f"calibration written to {run.calibration_file}")


@eval_group.command("candidate-recall")
@click.option("--method", "method_text", required=True, help="bundle:PATH (encodes posts for sparse / k-NN paths).")
@click.option("--data", type=click.Choice(["semeval", "travel"]), default="semeval", show_default=True)
@click.option("--set", "set_name", default="test", show_default=True, help="SemEval set (dev/test) or Travel split.")
@click.option("--k", type=int, default=20, show_default=True, help="Candidates per retrieval path.")
@click.option("--opensearch", "url", help="OpenSearch URL (default: settings / the embedded node).")
@click.option("--json", "as_json", is_flag=True)
def candidate_recall_cmd(method_text, data, set_name, k, url, as_json) -> None:
    """Share of relevant posts among the reranker's candidates: BM25 alone vs hybrid candidate sets.

    \b
    Example:
      semdup eval candidate-recall --method bundle:artifacts/bundles/t-scqa-semeval --data semeval --k 20
      semdup eval candidate-recall --method bundle:artifacts/bundles/bow-cnn-travel --data travel --k 100
    """
    from semdup.bundle.bundle import Bundle
    from semdup.data import load_semeval_xml, load_stackexchange_dump
    from semdup.data.paths import semeval_files, travel_dir
    from semdup.evaluation.through_reranker import candidate_recall, semantic_index

    method = parse_method(method_text)
    if method.kind != "bundle":
        raise click.BadParameter("give bundle:PATH", param_hint="--method")
    client = _client(url, True)
    bundle = Bundle.load(method.path)
    if data == "semeval":
        sem = load_semeval_xml(*semeval_files(set_name), name=set_name)
        posts = sem.related_posts()
        queries = [(q.post, {r.post.id for r in q.related if r.relevant}, None) for q in sem.questions]
    else:
        dump = load_stackexchange_dump(travel_dir())
        posts = dump.corpus()
        queries = [(q.post, set(q.relevant), q.post.id) for q in dump.queries(set_name)]
    with semantic_index(client, bundle, posts, f"recall-{data}") as index:
        table = candidate_recall(client, bundle, index, queries, k)
    if as_json:
        click.echo(json.dumps({"data": data, "set": set_name, "k": k, "model": bundle.version, "sets": table},
                              indent=2))
        return
    click.echo(f"{bundle.version} on {data} {set_name}, k = {k} per path")
    click.echo(f"{'candidates':<18} {'recall':>7} {'mean size':>9}")
    for name, row in table.items():
        click.echo(f"{name:<18} {row['recall']:7.2f} {row['candidates']:9.1f}")
