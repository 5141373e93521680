"""A fine-tuned checkpoint as what it changed in its pre-trained base, in shards small enough to move.

A fine-tuned MiniLM checkpoint is 90 MB, most of it weights that fine-tuning froze (the embeddings and the
bottom layers). To move one between machines with size limits (a GPU machine lent for a training run takes
and returns at most 64 MB, 16 MB a file), ``write`` keeps only the state entries that differ from the base
model built from the checkpoint's own hparams, in ``delta-NNN.pt`` shards, beside config.json, vocab.json
and metrics.json; ``read`` rebuilds the base the same way, loads the delta over it and writes an ordinary
checkpoint. ``base16`` writes a copy of the MiniLM package folder with half-precision weights (45 MB), which
:func:`semdup.training.models.minilm._load_bert` loads back as float32: both machines build the same base
from that copy, so the rebuilt checkpoint is bit-for-bit the trained one.

Run::

    python -m experiments.checkpoint_delta base16 .gpu/minilm16
    # on the GPU machine: semdup train ... --set model_dir=.gpu/minilm16 --device cuda --out /tmp/ckpt
    python -m experiments.checkpoint_delta write /tmp/ckpt $OUT/ckpt
    # back here:
    python -m experiments.checkpoint_delta read FETCHED/ckpt artifacts/bow-minilm-semeval-gpu \\
        --model-dir .gpu/minilm16
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from semdup.core.errors import BundleError
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary
from semdup.training.checkpoint import (
    CONFIG_FILE,
    DERIVED_CONFIG_KEYS,
    METRICS_FILE,
    VOCAB_FILE,
    load_checkpoint,
    save_checkpoint,
)
from semdup.training.models._base import EncoderModel
from semdup.training.registry import get_arch

__all__ = ["write_delta", "read_delta", "write_half_precision_base"]

logger = logging.getLogger(__name__)

SHARD_BYTES = 15 * 2**20
MANIFEST = "delta.json"


def _base_model(config: Mapping[str, Any], pipeline: TextPipeline) -> EncoderModel:
    """The model as fine-tuning started it: the config's arch and hparams on pre-trained weights."""
    spec = get_arch(config["arch"])
    return spec.model_class.from_hparams(config.get("hparams", {}), pipeline, pretrained=True)


def write_delta(ckpt_dir: str | Path, out_dir: str | Path, shard_bytes: int = SHARD_BYTES) -> list[str]:
    """Write the entries of ``ckpt_dir``'s weights that differ from its base model; returns the entry names."""
    model, pipeline, config = load_checkpoint(ckpt_dir)
    base = _base_model(config, pipeline).state_dict()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    changed = {k: v for k, v in model.state_dict().items() if k not in base or not torch.equal(v, base[k])}
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in changed.items():
        n = tensor.numel() * tensor.element_size()
        if shards[-1] and size + n > shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor.contiguous()
        size += n
    files = []
    for i, shard in enumerate(shards):
        files.append(f"delta-{i:03d}.pt")
        torch.save(shard, out / files[-1])
    for f in (CONFIG_FILE, VOCAB_FILE, METRICS_FILE):
        if Path(ckpt_dir, f).exists():
            shutil.copy2(Path(ckpt_dir, f), out / f)
    (out / MANIFEST).write_text(json.dumps({"shards": files, "entries": sorted(changed)}, indent=1), encoding="utf-8")
    logger.info("%d of %d entries differ from the base; %d shard(s) in %s", len(changed), len(base), len(files), out)
    return sorted(changed)


def read_delta(
    delta_dir: str | Path, out_dir: str | Path, model_dir: str | None = None, record_model_dir: str | None = None
) -> Path:
    """Rebuild a full checkpoint from ``delta_dir``.

    ``model_dir`` overrides the base folder the config names; ``record_model_dir`` is the folder the new
    checkpoint's config names (``""``: the MiniLM package's copy, which has the same config and tokenizer;
    the weights all come from model.pt).
    """
    d = Path(delta_dir)
    try:
        manifest = json.loads((d / MANIFEST).read_text(encoding="utf-8"))
        config = json.loads((d / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BundleError(f"{d} is not a checkpoint delta (written by 'checkpoint_delta write'): {exc}") from exc
    if model_dir is not None:
        config["hparams"] = {**config.get("hparams", {}), "model_dir": model_dir}
    pipeline = TextPipeline(TextPipelineSettings.from_dict(config["pipeline"]), Vocabulary.load(d / VOCAB_FILE))
    model = _base_model(config, pipeline)
    state = model.state_dict()
    delta: dict[str, torch.Tensor] = {}
    for f in manifest["shards"]:
        delta.update(torch.load(d / f, map_location="cpu", weights_only=True))
    if sorted(delta) != sorted(manifest["entries"]) or set(delta) - set(state):
        raise BundleError(f"{d}: the shards do not hold the entries delta.json lists, or hold unknown ones")
    state.update(delta)
    model.load_state_dict(state)
    if record_model_dir is not None:
        model.hparams["model_dir"] = record_model_dir
    kept = {k: v for k, v in config.items() if k not in DERIVED_CONFIG_KEYS}
    out = save_checkpoint(out_dir, model, config["arch"], pipeline, kept)
    if (d / METRICS_FILE).exists():
        shutil.copy2(d / METRICS_FILE, out / METRICS_FILE)
    return out


def write_half_precision_base(out_dir: str | Path, model_dir: str | None = None) -> Path:
    """Copy the MiniLM folder with its weights stored as float16 (loaded back as float32)."""
    from safetensors.torch import load_file, save_file

    from semdup.training.models.minilm import minilm_model_dir

    src = minilm_model_dir(model_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.name != "model.safetensors":
            shutil.copy2(f, out / f.name)
    weights = load_file(str(src / "model.safetensors"))
    save_file({k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in weights.items()},
              str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.checkpoint_delta", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="checkpoint -> delta shards")
    w.add_argument("checkpoint")
    w.add_argument("out")
    r = sub.add_parser("read", help="delta shards -> checkpoint")
    r.add_argument("delta")
    r.add_argument("out")
    r.add_argument("--model-dir", help="the base MiniLM folder here (default: the one the config names)")
    r.add_argument("--record-model-dir", help='the MiniLM folder the new config names ("" = the package copy)')
    b = sub.add_parser("base16", help="a float16 copy of the MiniLM package folder")
    b.add_argument("out")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.cmd == "write":
        names = write_delta(args.checkpoint, args.out)
        print(f"{len(names)} changed entries written to {args.out}")
    elif args.cmd == "read":
        print(f"checkpoint written to {read_delta(args.delta, args.out, args.model_dir, args.record_model_dir)}")
    else:
        print(f"float16 MiniLM copy written to {write_half_precision_base(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
