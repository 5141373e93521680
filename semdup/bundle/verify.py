"""The cross-checks :meth:`semdup.bundle.bundle.Bundle.load` runs once the files' hashes are known good.

Hashes only prove nothing changed since export; these prove the pieces fit each other:

* the text-pipeline settings parse, vocab.json has ``vocab_size`` tokens;
* term_weights.npy is a finite 1-D float array with one weight per vocabulary token;
* the input kind is known and its input names are the manifest's and the ONNX graph's, in order;
* the ONNX output is ``vector`` with ``dimension`` columns (checked on a probe run too);
* the encoder's id range agrees with the vocabulary (``text_ids``, ``title_body_ids``), the trigram
  buckets (``trigram_ids``) or the tokenizer (``wordpiece``): a probe with the largest id runs, and one with
  the next id is refused by the embedding lookup.

Torch-free: numpy, onnxruntime and (for wordpiece) tokenizers only.
"""

from __future__ import annotations

import io
import json
import logging
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from semdup.core.errors import BundleError
from semdup.core.inputs import input_names
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary

__all__ = ["check_bundle", "expected_id_range", "make_session"]

logger = logging.getLogger(__name__)

_ENCODER, _VOCAB, _TERMS, _TOKENIZER = "encoder.onnx", "vocab.json", "term_weights.npy", "tokenizer.json"
_OUTPUT = "vector"


def _vocab(files: Mapping[str, bytes], where: Path) -> Vocabulary:
    try:
        d = json.loads(files[_VOCAB].decode("utf-8"))
        return Vocabulary(d["tokens"], d["df"], d["n_docs"])
    except KeyError as exc:
        raise BundleError(f"{where}: {_VOCAB} is missing or lacks {exc}; re-export the bundle") from exc
    except (UnicodeDecodeError, ValueError, TypeError) as exc:
        raise BundleError(f"{where}/{_VOCAB} is not a semdup vocabulary: {exc}") from exc


def _term_weights(
    files: Mapping[str, bytes], manifest: Mapping[str, Any], vocab_size: int, where: Path
) -> np.ndarray | None:
    if _TERMS not in manifest["files"]:
        if float(manifest["fusion"].get("beta_bow", 0.0)) != 0.0:
            raise BundleError(f"{where}: fusion beta_bow={manifest['fusion']['beta_bow']} needs {_TERMS}, "
                              "which the bundle lacks; re-export it")
        return None
    try:
        t = np.load(io.BytesIO(files[_TERMS]), allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise BundleError(f"{where}/{_TERMS} is not a numpy array file: {exc}") from exc
    if t.ndim != 1 or t.dtype.kind != "f":
        raise BundleError(f"{where}/{_TERMS} holds a {t.dtype} array of shape {t.shape}; expected 1-D float weights")
    if len(t) != vocab_size:
        raise BundleError(f"{_TERMS} has {len(t)} weights but {_VOCAB} has {vocab_size} tokens ({where}); "
                          "the two come from different models: re-export the bundle")
    if not np.isfinite(t).all():
        raise BundleError(f"{where}/{_TERMS} holds {int((~np.isfinite(t)).sum())} non-finite weights")
    return t.astype(np.float32)


def expected_id_range(kind: str, pipeline: TextPipeline, vocab_size: int) -> int | None:
    """How many distinct ids the encoder's lookup table must accept for this input kind (None: unknown kind)."""
    if kind in ("text_ids", "title_body_ids"):
        return vocab_size
    if kind == "trigram_ids":
        return pipeline.settings.trigram_buckets + 1
    if kind == "wordpiece":
        return int(pipeline.wordpiece_tokenizer.get_vocab_size())
    return None


def make_session(model: bytes, providers: list[str], intra_op_threads: int | None,
                 allow_spinning: bool = False, cuda_errors: list[str] | None = None) -> Any:
    """One onnxruntime session over the model bytes (``allow_spinning``: let idle pool threads spin, see below).

    With CUDA asked for before CPU, a CUDA provider that fails to build the session leaves a CPU session, its
    error appended to ``cuda_errors`` (:func:`semdup.bundle.devices.session_fallback` says it in one line),
    instead of onnxruntime's own fallback, which prints a banner to stdout.
    """
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise ImportError(
            'model bundles need onnxruntime: pip install "semdup[serve]" (CPU) or "semdup[gpu]" (CUDA), not both'
        ) from exc
    opts = ort.SessionOptions()
    if intra_op_threads:
        opts.intra_op_num_threads = int(intra_op_threads)
    opts.log_severity_level = 3
    # Pool threads sleep between operators instead of spinning: a worker shares its cores with OpenSearch, its
    # bulk-writer thread and other workers, and a spinning thread burns a core that one of them needs. MiniLM on
    # 300 Travel posts, 2 threads, the shared 2-core machine (load 8.6): 1.63x the posts/s and 31 % less CPU per
    # post without spinning (figures and command in semdup/bundle/README.md). With 1 thread (the reranker
    # service's default) there is no pool and this changes nothing.
    spin = "1" if allow_spinning else "0"
    opts.add_session_config_entry("session.intra_op.allow_spinning", spin)
    opts.add_session_config_entry("session.inter_op.allow_spinning", spin)
    if "CUDAExecutionProvider" in providers:
        try:
            with warnings.catch_warnings():  # the CPU build names a provider it lacks: the caller says it once
                warnings.filterwarnings("ignore", message="Specified provider")
                return ort.InferenceSession(model, sess_options=opts, providers=providers, enable_fallback=0)
        except Exception as exc:  # onnxruntime raises its own Fail/EPFail types
            if "CPUExecutionProvider" not in providers:
                raise BundleError(f"onnxruntime cannot load {_ENCODER} on CUDA: {exc}") from exc
            if cuda_errors is not None:
                cuda_errors.append(str(exc))
            providers = ["CPUExecutionProvider"]
    try:
        return ort.InferenceSession(model, sess_options=opts, providers=providers)
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
        raise BundleError(f"onnxruntime cannot load {_ENCODER}: {exc}") from exc


def _probe(kind: str, pipeline: TextPipeline, value: int) -> dict[str, np.ndarray]:
    if kind == "trigram_ids":
        arr = np.zeros((1, 3, pipeline.settings.max_trigrams_per_word), dtype=np.int64)
        arr[0, :, 0] = value
        return {"trigram_ids": arr}
    if kind == "wordpiece":
        return {"input_ids": np.full((1, 3), value, dtype=np.int64), "attention_mask": np.ones((1, 3), dtype=np.int64)}
    return {name: np.full((1, 3), value, dtype=np.int64) for name in input_names(kind)}


def _check_session(session: Any, manifest: Mapping[str, Any], pipeline: TextPipeline, vocab_size: int,
                   where: Path) -> None:
    kind, dim = manifest["input_kind"], manifest["dimension"]
    graph_inputs = [i.name for i in session.get_inputs()]
    if graph_inputs != list(input_names(kind)):
        raise BundleError(f"{where}/{_ENCODER} takes inputs {graph_inputs} but input kind {kind!r} gives "
                          f"{list(input_names(kind))}; re-export the bundle")
    outputs = session.get_outputs()
    if outputs[0].name != _OUTPUT or (isinstance(outputs[0].shape[-1], int) and outputs[0].shape[-1] != dim):
        raise BundleError(f"{where}/{_ENCODER} outputs {outputs[0].name!r} of shape {outputs[0].shape} but "
                          f"{'manifest.json'} says {_OUTPUT!r} with dimension {dim}")
    id_range = manifest.get("id_range")
    expected = expected_id_range(kind, pipeline, vocab_size)
    if expected is not None and id_range != expected:
        raise BundleError(f"{where}: manifest.json says the encoder embeds {id_range} ids but the "
                          f"{kind} input of this bundle produces ids below {expected}; re-export the bundle")
    if id_range is None:
        return
    import onnxruntime as ort

    quiet = ort.RunOptions()
    quiet.log_severity_level = 4  # the refused probe below is expected; do not log it as an error
    try:
        out = session.run([_OUTPUT], _probe(kind, pipeline, id_range - 1), quiet)[0]
    except Exception as exc:
        raise BundleError(f"{where}/{_ENCODER} refuses id {id_range - 1} although the bundle's {kind} input "
                          f"produces ids up to {id_range - 1}: {str(exc)[:200]}") from exc
    if out.shape != (1, dim):
        raise BundleError(f"{where}/{_ENCODER} returns shape {out.shape} for one post; manifest.json says "
                          f"dimension {dim}")
    try:
        session.run([_OUTPUT], _probe(kind, pipeline, id_range), quiet)
    except Exception:
        return  # refused, as it must be: the lookup table has exactly id_range rows
    raise BundleError(f"{where}/{_ENCODER} accepts id {id_range}, so its lookup table is larger than the "
                      f"{id_range} ids of the bundle's {kind} input; the encoder and vocabulary come from "
                      "different models: re-export the bundle")


def check_bundle(files: Mapping[str, bytes], manifest: Mapping[str, Any], where: Path, providers: list[str],
                 intra_op_threads: int | None, allow_spinning: bool = False,
                 cuda_errors: list[str] | None = None) -> tuple[TextPipeline, np.ndarray | None, Any]:
    """(pipeline, term weights or None, onnxruntime session or None) after every cross-check passes
    (``cuda_errors``: see :func:`make_session`)."""
    try:
        settings = TextPipelineSettings.from_dict(manifest["pipeline"])
    except (TypeError, ValueError) as exc:
        raise BundleError(f"{where}: manifest.json text-pipeline settings do not parse: {exc}") from exc
    vocab = _vocab(files, where)
    if len(vocab) != manifest["vocab_size"]:
        raise BundleError(f"{where}: manifest.json says vocab_size={manifest['vocab_size']} but {_VOCAB} has "
                          f"{len(vocab)} tokens; re-export the bundle")
    pipeline = TextPipeline(settings, vocab)
    term_weights = _term_weights(files, manifest, len(vocab), where)
    kind = manifest["input_kind"]
    if kind == "wordpiece":
        from semdup.core.wordpiece import attach_wordpiece  # registers the input kind

        attach_wordpiece(pipeline, _tokenizer(files, manifest, where))
    names = list(input_names(kind))
    if list(manifest["input_names"]) != names:
        raise BundleError(f"{where}: manifest.json names inputs {manifest['input_names']} but input kind {kind!r} "
                          f"gives {names}")
    if manifest.get("dimension") is None:
        return pipeline, term_weights, None
    session = make_session(files[_ENCODER], providers, intra_op_threads, allow_spinning, cuda_errors)
    _check_session(session, manifest, pipeline, len(vocab), where)
    return pipeline, term_weights, session


def _tokenizer(files: Mapping[str, bytes], manifest: Mapping[str, Any], where: Path) -> Any:
    """The wordpiece tokenizer, set up exactly as :func:`semdup.core.wordpiece.load_wordpiece_tokenizer`."""
    if _TOKENIZER not in files:
        raise BundleError(f"{where}: input kind 'wordpiece' needs {_TOKENIZER}, which the bundle lacks")
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise ImportError('wordpiece bundles need the tokenizers package: pip install "tokenizers>=0.15"') from exc
    try:
        tok = Tokenizer.from_str(files[_TOKENIZER].decode("utf-8"))
    except Exception as exc:  # tokenizers raises plain Exception from Rust
        raise BundleError(f"{where}/{_TOKENIZER} is not a tokenizer.json: {exc}") from exc
    tok.no_padding()
    tok.enable_truncation(max_length=int(manifest["tokenizer"]["max_len"]))
    return tok
