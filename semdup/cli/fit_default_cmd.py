"""``semdup fit-default``: the hybrid default bundle (base encoder + corpus IDF + BM25), fitted on dev on CPU."""

from __future__ import annotations

import json
from pathlib import Path

import click

from semdup.training.base_encoders import base_encoder_names

__all__ = ["fit_default_cmd"]


@click.command("fit-default")
@click.option("--base-encoder", type=click.Choice(base_encoder_names()), default="minilm", show_default=True,
              help="The dense encoder: minilm (fast on CPU) or mpnet (the accurate preset, ~6x slower).")
@click.option("--base-bundle", type=click.Path(path_type=Path),
              help="Its bundle (default artifacts/bundles/NAME; exported there with torch when absent).")
@click.option("--data", required=True,
              help="Labelled duplicates to fit on: travel | semeval | askubuntu (their training queries), a Stack "
                   "Exchange dump folder (with splits.tsv; its train split) or a .jsonl file of labelled pairs.")
@click.option("--corpus", type=click.Path(exists=True, path_type=Path),
              help="Posts to be indexed (JSONL, SemEval XML or dump folder); their text joins the IDF vocabulary.")
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path),
              help="Bundle directory to write (replaced if it exists).")
@click.option("--k", type=click.IntRange(1, 1000), default=100, show_default=True,
              help="Candidates per path (BM25, k-NN) for retrieval data.")
@click.option("--knn/--no-knn", default=True, show_default=True,
              help="Add the k nearest dense vectors to BM25's candidates, as the reranker does with --knn.")
@click.option("--cache", "cache_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Keep the corpus's dense vectors here (re-fits skip the slow encoding).")
@click.option("--title/--no-title", default=True, show_default=True,
              help="Offer the title term (cosine of the titles' own vectors) to the grid; --no-title fits without it.")
@click.option("--int8", type=click.Choice(["off", "auto"]), default="off", show_default=True,
              help="auto: also fit over the int8 encoder (about half the CPU per post) and ship it if its dev "
                   "figure is at most 0.3 below fp32's; both figures go into the manifest.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def fit_default_cmd(base_encoder: str, base_bundle: Path | None, data: str, corpus: Path | None, out_dir: Path,
                    k: int, knn: bool, cache_dir: Path | None, title: bool, int8: str, as_json: bool) -> None:
    """Fit the hybrid default on your labelled duplicates and write its bundle (no training, no GPU).

    s = beta_bow * cos_bow(idf) + beta_dense * cos_dense + alpha * lexnorm(BM25) + beta_title * cos_title;
    (beta_bow, alpha, beta_title) are chosen by a grid on the training queries (beta_dense = 1; dev stays for
    checking) and stored in the manifest.
    cos_title is the cosine of the titles' own vectors (the workers then encode each title too). Index with
    --knn to get the k-NN candidates.

    \b
    Example:
      semdup fit-default --base-encoder minilm --data travel --out artifacts/bundles/default-travel
      semdup fit-default --data pairs.jsonl --corpus posts.jsonl --out artifacts/bundles/default-mine
      semdup fit-default --data travel --int8 auto --out artifacts/bundles/default-travel-int8
    """
    from semdup.data.posts_input import read_posts
    from semdup.learn.default_bundle import fit_default

    base = base_bundle or Path("artifacts/bundles") / base_encoder
    if not (base / "manifest.json").exists() and not base.is_file():
        from semdup.export.base_encoder_bundle import export_base_encoder

        click.echo(f"$ semdup export --base-encoder {base_encoder} --out {base}", err=True)
        export_base_encoder(base_encoder, base)
    posts = read_posts(corpus) if corpus is not None else ()
    from semdup.learn.fusion_fit import GRID_TITLE

    result = fit_default(base, data, out_dir, corpus=posts, k=k, knn=knn, cache_dir=cache_dir,
                         grid_title=GRID_TITLE if title else (0.0,), int8=int8)
    out = {"bundle": str(result.bundle_dir), "version": result.version, "fusion": result.fusion,
           "fit": {result.measure: round(result.dev, 2)}, "threshold": result.threshold, "fit_queries": result.n_dev,
           "vocab_size": result.vocab_size, "seconds": round(result.seconds, 1), "quantization": result.quantization,
           "flagging": None if result.flagging is None else {"k": result.flagging.k,
                                                              "threshold": result.flagging.threshold,
                                                              "file": str(result.flagging_file)}}
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    f = result.fusion
    click.echo(f"{result.version}: beta_bow {f['beta_bow']:g}, beta_dense {f['beta_dense']:g}, alpha {f['alpha']:g}, "
               f"beta_title {f.get('beta_title', 0.0):g} chosen on {result.n_dev} training items of {data} "
               f"({result.measure} {result.dev:.2f})")
    q = result.quantization
    if q is not None:
        click.echo(f"int8 ({q['mode']}): fit {q['dev_int8']:.2f} vs fp32 {q['dev_fp32']:.2f} ({q['change']:+.2f}); "
                   + ("the int8 encoder is shipped" if q["chosen"] else f"fp32 kept (drop above {q['max_drop']:g})"))
    if result.flagging is not None:
        click.echo(f"flagging: k={result.flagging.k}, threshold {result.flagging.threshold:.4f} "
                   f"({result.flagging.fitted_on}), written to {result.flagging_file}")
    click.echo(f"bundle written to {result.bundle_dir} ({result.vocab_size} terms, {result.seconds:.0f} s)")
