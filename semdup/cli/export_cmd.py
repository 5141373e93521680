"""``semdup export``: a training checkpoint or a named base encoder → a verified ONNX model bundle (directory,
optionally .tar.gz)."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

import click

from semdup.training.base_encoders import base_encoder_names

if TYPE_CHECKING:
    from semdup.export.onnx_export import ExportResult

__all__ = ["export"]

logger = logging.getLogger(__name__)


@click.command(name="export")
@click.option("--checkpoint", "checkpoint_dir", type=click.Path(exists=True, file_okay=False),
              help="Checkpoint directory written by 'semdup train'.")
@click.option("--base-encoder", type=click.Choice(base_encoder_names()), default=None,
              help="Instead of --checkpoint: a pre-trained encoder as published (hash-checked package files).")
@click.option("--out", "out_dir", required=True, type=click.Path(),
              help="Bundle directory to write (replaced if it exists).")
@click.option("--archive", is_flag=True, help="Also write OUT.tar.gz (reproducible: same bundle, same bytes).")
@click.option("--quantize", type=click.Choice(["int8"]), default=None,
              help="Dynamic int8 weights; the SemEval dev MAP change is measured and stored in the manifest.")
@click.option("--parity-posts", "parity_file", type=click.Path(exists=True, dir_okay=False),
              help="Pairs JSONL whose posts check ONNX against torch (default: AskUbuntu test pairs).")
@click.option("--parity-count", type=click.IntRange(1, 10_000), default=64, show_default=True,
              help="How many real posts the parity check uses.")
@click.option("--opset", type=click.IntRange(17, 23), default=17, show_default=True, help="ONNX opset.")
@click.option("--threads", type=click.IntRange(1, 64), default=2, show_default=True, help="torch CPU threads.")
@click.option("--parity-only", is_flag=True,
              help="Export nothing: compare the existing bundle OUT (dir or .tar.gz) with the checkpoint.")
def export(checkpoint_dir: str | None, base_encoder: str | None, out_dir: str, archive: bool, quantize: str | None,
           parity_file: str | None, parity_count: int, opset: int, threads: int, parity_only: bool) -> None:
    """Export a trained checkpoint, or a pre-trained base encoder, to a verified ONNX model bundle.

    The bundle holds encoder.onnx, vocab.json, term_weights.npy (BOW models), tokenizer.json
    (MiniLM, MPNet) and manifest.json with a content-hash version id. The export is refused if ONNX and
    torch differ by more than 1e-4 on real posts, and the written bundle is loaded and verified.

    \b
    Example:
      semdup export --checkpoint artifacts/bow-cnn-travel --out artifacts/bundles/bow-cnn-travel --archive
      semdup export --base-encoder mpnet --out artifacts/bundles/mpnet
      semdup export --checkpoint artifacts/bow-cnn-travel --out artifacts/bundles/bow-cnn-travel.tar.gz --parity-only
    """
    import torch

    from semdup.export.onnx_export import export_checkpoint
    from semdup.export.parity import sample_posts

    if (checkpoint_dir is None) == (base_encoder is None):
        raise click.UsageError("give exactly one of --checkpoint and --base-encoder")
    if parity_only and checkpoint_dir is None:
        raise click.UsageError("--parity-only compares a bundle with its checkpoint; give --checkpoint")
    torch.set_num_threads(threads)
    posts = sample_posts(parity_count, parity_file)
    if base_encoder is not None:
        from semdup.export.base_encoder_bundle import export_base_encoder

        result = export_base_encoder(base_encoder, out_dir, archive=archive, quantize=quantize, parity_posts=posts,
                                     opset=opset)
        _print_result(result)
        return
    if parity_only:
        from semdup.export.parity import parity_report

        report = parity_report(checkpoint_dir, out_dir, posts)
        click.echo(json.dumps(report.to_dict(), sort_keys=True))
        if not report.ok:
            limit = report.tolerance
            raise click.ClickException(f"bundle {out_dir} differs from {checkpoint_dir} by more than {limit:g}")
        return
    result = export_checkpoint(checkpoint_dir, out_dir, archive=archive, quantize=quantize, parity_posts=posts,
                               opset=opset)
    _print_result(result)


def _print_result(result: ExportResult) -> None:
    click.echo(f"version      {result.version}")
    click.echo(f"bundle       {result.bundle_dir}")
    if result.archive is not None:
        click.echo(f"archive      {result.archive} ({result.archive.stat().st_size} bytes)")
    click.echo(f"dimension    {result.dimension}")
    click.echo(f"parity       max |torch - onnx| = {result.max_abs_dense:.3g} on {result.n_parity_posts} real posts")
    if result.quantization is not None:
        click.echo(f"quantization {json.dumps(result.quantization, sort_keys=True)}")
