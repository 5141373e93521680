"""The verified model bundle: what `semdup export` writes and what workers and the reranker load, torch-free.

A bundle is a directory (or one ``.tar.gz`` of it)::

    manifest.json      architecture, input kind + names, dimension, fusion weights, threshold, text-pipeline
                       settings, vocab size, data, dev/test figures, library versions, opset, per-file sha256
                       and sizes, and ``version`` = ``<arch>-<first 12 hex of the content hash>``
    encoder.onnx       the dense encoder (inputs named by the input kind, output ``vector`` [B, D])
    vocab.json         the vocabulary (``Vocabulary.save``)
    term_weights.npy   t [|V|] float32 (architectures with a bag-of-words path only)
    tokenizer.json     the wordpiece tokenizer (``wordpiece`` input kind only)

The content hash is sha256 over, in sorted file-name order, each file's name and sha256, then the canonical
JSON of the manifest entries that change a score (:data:`SCORING_KEYS`). Two bundles with the same version
score every post identically, so an index never mixes vectors of two models.

:meth:`Bundle.load` checks every piece against the others and refuses a bundle that disagrees with itself
(:class:`~semdup.core.errors.BundleError` naming both values). This module imports numpy and onnxruntime, never torch.

Example::

    bundle = Bundle.load("artifacts/bundles/bow-cnn-travel.tar.gz")
    bundle.document_fields([Post("1", "How do I mount a USB drive?", "")])
    # [{"vector": [...400 floats...], "terms": {"mount": 0.61, ...}, "model": "bow-cnn-3f2a9c0d1e7b"}]
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import tarfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from semdup.bundle.batching import length_batches, pad_rows
from semdup.bundle.devices import DeviceChoice, choose_device, log_choice, session_fallback
from semdup.bundle.runner import EncoderRunner
from semdup.core.errors import BundleError, ConfigError, SemdupError
from semdup.core.inputs import build_inputs, input_names, pad_sequences
from semdup.core.posts import Post
from semdup.core.scoring import TITLE_WEIGHT, title_posts
from semdup.core.text_pipeline import PAD_ID, UNK_ID, TextPipeline, check_post
from semdup.index_format.packed_fields import PackedTerms
from semdup.index_format.schema import feature_name

__all__ = [
    "MANIFEST_FILE",
    "ENCODER_FILE",
    "VOCAB_FILE",
    "TERM_WEIGHTS_FILE",
    "TOKENIZER_FILE",
    "SCORING_KEYS",
    "Bundle",
    "content_version",
    "file_entry",
    "write_bundle",
    "write_archive",
    "read_bundle_files",
    "PreparedPosts",
]

logger = logging.getLogger(__name__)

MANIFEST_FILE = "manifest.json"
ENCODER_FILE = "encoder.onnx"
VOCAB_FILE = "vocab.json"
TERM_WEIGHTS_FILE = "term_weights.npy"
TOKENIZER_FILE = "tokenizer.json"
OUTPUT_NAME = "vector"
FORMAT_VERSION = 1
# Manifest entries that change a score; they enter the content hash beside the files.
SCORING_KEYS = (
    "architecture", "input_kind", "input_names", "output_name", "dimension", "id_range",
    "fusion", "threshold", "pipeline", "tokenizer",
)
_MAX_ARCHIVE_BYTES = 2 << 30  # refuse archives that unpack to more than 2 GiB
DEFAULT_BATCH = 64  # posts per encoder call for the cheap (CNN-family) encoders
# Transformer encoders: sequences per call of a length-sorted batch on CPU. Sorted batches of 8 pad little and
# measured best of 1 / 8 / 16 on 2 CPU threads (docs/benchmarks.md, "CPU encoding ratio").
WORDPIECE_BATCH = 8
# The document path (document_fields, what the indexer runs) on CPU, one onnxruntime thread per stream: batches of
# 4 cost 32.7 CPU ms per post, 6: 33.6, 8: 34.9, 12: 36.2 on the Travel default (benchmarks/ingest_profile.py
# --seq-batches, docs/benchmarks.md, issue #28).
STREAM_BATCH = 4
# On a GPU: up to 1,024 sequences per call (the torch reference's batch), and at most this many padded tokens, so
# that a batch of the longest posts stays within a few hundred MB of activations.
GPU_BATCH_ROWS = 1024
GPU_BATCH_TOKENS = 131_072
_LENGTH_SORTED_KINDS = frozenset({"wordpiece"})
_SORT_WINDOW = 1024  # posts tokenised and sorted together (bounds the id arrays to a few MB)


def file_entry(data: bytes) -> dict[str, Any]:
    """``{"sha256": hex, "bytes": size}`` of one bundle file."""
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def content_version(manifest: Mapping[str, Any]) -> str:
    """``<arch>-<12 hex>``: sha256 over the files (sorted by name) and the scoring entries of the manifest."""
    h = hashlib.sha256()
    for name in sorted(manifest["files"]):
        h.update(name.encode("utf-8") + b"\0" + manifest["files"][name]["sha256"].encode("ascii") + b"\n")
    scoring = {k: manifest.get(k) for k in SCORING_KEYS}
    h.update(json.dumps(scoring, sort_keys=True, separators=(",", ":")).encode("utf-8"))
    return f"{manifest['architecture']}-{h.hexdigest()[:12]}"


def write_bundle(out_dir: str | Path, files: Mapping[str, bytes], manifest: Mapping[str, Any]) -> Path:
    """Write ``files`` and a sealed manifest.json (file hashes, sizes, version) into ``out_dir``.

    Files go to a sibling temporary directory first, then replace ``out_dir`` in one rename, so a reader
    never sees half a bundle. Returns ``out_dir``.
    """
    out = Path(out_dir)
    sealed = dict(manifest)
    sealed["format_version"] = FORMAT_VERSION
    sealed["files"] = {name: file_entry(data) for name, data in sorted(files.items())}
    sealed["version"] = content_version(sealed)
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        _remove_tree(tmp)
    tmp.mkdir(parents=True)
    for name, data in files.items():
        (tmp / name).write_bytes(data)
    (tmp / MANIFEST_FILE).write_text(json.dumps(sealed, indent=2, sort_keys=True), encoding="utf-8")
    if out.exists():
        _remove_tree(out)
    tmp.rename(out)
    logger.info("wrote bundle %s (%s)", out, sealed["version"])
    return out


def _remove_tree(path: Path) -> None:
    for p in sorted(path.rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    path.rmdir()


def write_archive(bundle_dir: str | Path, out_path: str | Path) -> Path:
    """One reproducible ``.tar.gz`` of a bundle directory: members under ``<version>/``, zero mtimes and owners."""
    src = Path(bundle_dir)
    version = json.loads((src / MANIFEST_FILE).read_text(encoding="utf-8"))["version"]
    out = Path(out_path)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for f in sorted(p for p in src.iterdir() if p.is_file()):
            data = f.read_bytes()
            info = tarfile.TarInfo(f"{version}/{f.name}")
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    with open(out, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0, filename="") as gz:
        gz.write(buf.getvalue())
    logger.info("wrote bundle archive %s", out)
    return out


def read_bundle_files(path: str | Path) -> dict[str, bytes]:
    """Every file of a bundle directory or ``.tar.gz`` archive, by name (archives unpack in memory)."""
    p = Path(path)
    if p.is_dir():
        return {f.name: f.read_bytes() for f in sorted(p.iterdir()) if f.is_file()}
    if not p.exists():
        raise BundleError(f"no model bundle at {p}; give the directory or .tar.gz that 'semdup export' wrote")
    try:
        tar = tarfile.open(p, mode="r:*")
    except (tarfile.TarError, OSError) as exc:
        raise BundleError(f"{p} is neither a bundle directory nor a readable .tar.gz archive: {exc}") from exc
    files: dict[str, bytes] = {}
    total = 0
    with tar:
        for m in tar.getmembers():
            if m.isdir():
                continue
            parts = Path(m.name).parts
            if not m.isfile() or m.name.startswith("/") or ".." in parts or len(parts) > 2:
                raise BundleError(f"{p}: archive member {m.name!r} is not a plain bundle file; re-export the bundle")
            total += m.size
            if total > _MAX_ARCHIVE_BYTES:
                raise BundleError(f"{p} unpacks to more than {_MAX_ARCHIVE_BYTES} bytes; it is not a semdup bundle")
            files[parts[-1]] = tar.extractfile(m).read()
    return files


def _unit(x: np.ndarray) -> np.ndarray:
    """Rows L2-normalised, float32 (a zero row stays zero)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(norms, 1e-12)).astype(np.float32)


def _load_json(files: Mapping[str, bytes], name: str, where: Path) -> Any:
    try:
        return json.loads(files[name].decode("utf-8"))
    except KeyError:
        raise BundleError(f"{where} has no {name}; re-export it with 'semdup export'") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise BundleError(f"{where}/{name} is not valid UTF-8 JSON: {exc}") from exc


def _verify_files(files: Mapping[str, bytes], manifest: Mapping[str, Any], where: Path) -> None:
    listed = manifest.get("files")
    if not isinstance(listed, dict):
        raise BundleError(f"{where}/{MANIFEST_FILE} has no 'files' table; re-export the bundle")
    if ENCODER_FILE not in listed and manifest.get("dimension") is not None:
        raise BundleError(f"{where}/{MANIFEST_FILE} gives dimension {manifest['dimension']} but lists no "
                          f"{ENCODER_FILE}; re-export the bundle")
    for name, entry in listed.items():
        if name not in files:
            raise BundleError(f"{where} lacks {name}, which {MANIFEST_FILE} lists; the bundle is incomplete")
        got = file_entry(files[name])
        if got["bytes"] != entry["bytes"]:
            raise BundleError(f"{where}/{name} has {got['bytes']} bytes but {MANIFEST_FILE} says {entry['bytes']}; "
                              "the file changed after export: re-export the bundle")
        if got["sha256"] != entry["sha256"]:
            raise BundleError(f"{where}/{name} has sha256 {got['sha256'][:16]}… but {MANIFEST_FILE} says "
                              f"{entry['sha256'][:16]}…; the file changed after export: re-export the bundle")
    extra = sorted(set(files) - set(listed) - {MANIFEST_FILE})
    if extra:
        logger.warning("bundle %s holds files its manifest does not list (ignored): %s", where, extra)
    version = content_version(manifest)
    if version != manifest.get("version"):
        raise BundleError(f"{where}/{MANIFEST_FILE} says version {manifest.get('version')!r} but its content "
                          f"hashes to {version!r}; the manifest was edited after export: re-export the bundle")


def _cut_wordpieces(arrays: Mapping[str, np.ndarray], max_len: int) -> dict[str, np.ndarray]:
    """Wordpiece inputs cut to ``max_len`` pieces: a longer row keeps its first ``max_len - 1`` pieces and its own
    last one ([SEP]), as :func:`semdup.core.wordpiece.wordpiece_inputs` with ``max_len`` cuts."""
    if max_len < 3:
        raise ValueError(f"max_wordpieces must be at least 3 ([CLS] x [SEP]); got {max_len}")
    lengths = arrays["attention_mask"].sum(axis=1)
    out = {name: np.array(a[:, :max_len]) for name, a in arrays.items()}
    for row in np.flatnonzero(lengths > max_len):
        out["input_ids"][row, max_len - 1] = arrays["input_ids"][row, lengths[row] - 1]
    return out


def _explicit_choice(providers: Sequence[str]) -> DeviceChoice:
    """Providers a caller gave (benchmarks, tests): CUDA first is the ``auto`` device's CUDA choice."""
    device = "cuda" if providers and providers[0] == "CUDAExecutionProvider" else "cpu"
    return DeviceChoice("auto", device, tuple(providers), gpu_build=device == "cuda")


@dataclass
class PreparedPosts:
    """What :meth:`Bundle.prepare_documents` does before the encoder runs, kept for :meth:`Bundle.encode_prepared`:
    the posts (checked), their text ids (when the BOW path or a ``text_ids`` encoder reads them), and for a
    wordpiece encoder the wordpiece ids of each post's text followed by those of each title (``title_at``: which
    posts have one)."""

    posts: list[Post]
    text_ids: list[list[int]] | None = None
    sequences: list[list[int]] | None = None
    title_at: list[int] = field(default_factory=list)


class Bundle:
    """A loaded, verified model bundle with one onnxruntime session (create it in each worker after fork).

    Attributes:
        path: the directory or archive it was loaded from.
        manifest: manifest.json as a dict.
        version: the content-hash version id (``bow-cnn-3f2a9c0d1e7b``), written as ``semdup.model``.
        arch: the architecture name.
        dimension: D of the dense vectors, or None without a dense encoder.
        fusion: β_bow, β_dense, α.
        threshold: the duplicate decision threshold, or None.
        pipeline: the text pipeline (settings + vocabulary, and the wordpiece tokenizer if any).
        input_kind: the encoder's input kind.
        term_weights: t [|V|] float32, or None without a BOW path.
        device: ``cpu`` or ``cuda``, where the session runs (:mod:`semdup.bundle.devices`).
        precision: ``fp32``, or ``fp16`` where the variant verified (:mod:`semdup.bundle.fp16`).
        runner: runs the session on many batches (:class:`~semdup.bundle.runner.EncoderRunner`; ``streams``).
    """

    def __init__(self, path: Path, manifest: dict[str, Any], pipeline: TextPipeline,
                 term_weights: np.ndarray | None, session: Any, *, device: str = "cpu", streams: int = 1,
                 precision: str = "fp32") -> None:
        self.path = path
        self.manifest = manifest
        self.version: str = manifest["version"]
        self.arch: str = manifest["architecture"]
        self.dimension: int | None = manifest.get("dimension")
        self.fusion: dict[str, float] = {k: float(v) for k, v in manifest["fusion"].items()}
        t = manifest.get("threshold")
        self.threshold: float | None = None if t is None else float(t)
        self.pipeline = pipeline
        self.input_kind: str = manifest["input_kind"]
        self.term_weights = term_weights
        self.session = session
        self.device = device
        self.precision = precision
        self.runner = EncoderRunner(session, input_names(self.input_kind), OUTPUT_NAME, device=device,
                                    streams=streams)
        self._names_cache: tuple[Any, list[str]] | None = None

    @classmethod
    def load(cls, path: str | Path, providers: list[str] | None = None, intra_op_threads: int | None = None,
             allow_spinning: bool = False, *, device: str = "auto", fp16: bool | None = None,
             streams: int | None = None) -> Bundle:
        """Read and verify a bundle directory or ``.tar.gz``; see :mod:`semdup.bundle.verify` for the checks.

        Args:
            path: the bundle directory or archive.
            providers: onnxruntime execution providers; given, they replace ``device``'s choice.
            intra_op_threads: onnxruntime intra-op threads of one run (default: onnxruntime's choice, all cores).
            allow_spinning: let idle onnxruntime pool threads spin (off: they sleep, leaving the core to
                OpenSearch and the other workers; see :func:`semdup.bundle.verify.make_session`).
            device: ``auto``, ``cpu`` or ``cuda`` (:mod:`semdup.bundle.devices`): ``auto`` falls back to CPU with
                one log line, ``cuda`` refuses to load without CUDA.
            fp16: the fp16 variant of the encoder (:mod:`semdup.bundle.fp16`): None uses it on CUDA where it
                verifies against fp32, True demands it (a BundleError where it does not verify), False never.
            streams: encoder batches run at once by the document path (default 1; see
                :class:`~semdup.bundle.runner.EncoderRunner`).

        Raises:
            BundleError: a missing or changed file, pieces that disagree (the message names both values), or an
                fp16 variant demanded that does not verify.
            ConfigError: device ``cuda`` where CUDA cannot be used.
            ValueError: an unknown device.
        """
        from semdup.bundle.verify import check_bundle

        where = Path(path)
        choice = _explicit_choice(providers) if providers else choose_device(device)
        files = read_bundle_files(where)
        manifest = _load_json(files, MANIFEST_FILE, where)
        if manifest.get("format_version") != FORMAT_VERSION:
            raise BundleError(f"{where}: bundle format {manifest.get('format_version')!r}, this semdup reads "
                              f"{FORMAT_VERSION}; re-export it with this version")
        cuda_errors: list[str] = []
        try:
            _verify_files(files, manifest, where)
            pipeline, term_weights, session = check_bundle(files, manifest, where, list(choice.providers),
                                                           intra_op_threads, allow_spinning, cuda_errors)
        except KeyError as exc:
            raise BundleError(f"{where}/{MANIFEST_FILE} lacks the entry {exc}; re-export the bundle") from exc
        except (BundleError, ConfigError):
            raise
        except SemdupError as exc:
            raise BundleError(f"bundle {where}: {exc}") from exc
        precision = "fp32"
        if session is not None:
            choice = session_fallback(choice, session.get_providers(), cuda_errors[0] if cuda_errors else None)
            log_choice(choice, f"bundle {manifest['version']}")
            if fp16 or (fp16 is None and choice.device == "cuda"):
                from semdup.bundle.fp16 import with_fp16_variant

                session, precision = with_fp16_variant(files[ENCODER_FILE], manifest, pipeline, session,
                                                       list(choice.providers), intra_op_threads, allow_spinning,
                                                       demanded=bool(fp16))
        logger.info("loaded bundle %s (%s, dimension %s, %s %s)", where, manifest["version"],
                    manifest.get("dimension"), choice.device, precision)
        return cls(where, manifest, pipeline, term_weights, session, device=choice.device, streams=streams or 1,
                   precision=precision)

    # --- encoding -----------------------------------------------------------------------------
    def run_encoder(self, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
        """Raw encoder output [B, D] float32 for input arrays named by the input kind."""
        return self.runner.run(arrays)

    def _text_ids(self, posts: Sequence[Post]) -> list[list[int]]:
        """Vocabulary ids of each post's title + body tokens: the ``text_ids`` input and the BOW counts alike."""
        pipeline = self.pipeline
        return [pipeline.ids(pipeline.text_tokens(p)) for p in posts]

    def _shared_text_ids(self, posts: Sequence[Post]) -> list[list[int]] | None:
        """Text ids when some path reads them (the BOW counts, a ``text_ids`` encoder), else None: callers that
        need both the vector and the terms tokenise once for both."""
        if self.term_weights is not None or (self.session is not None and self.input_kind == "text_ids"):
            return self._text_ids(posts)
        return None

    @property
    def sorts_by_length(self) -> bool:
        """Whether the document path sorts texts by length before batching them (transformer encoders: their cost
        follows the padded width; the indexer then encodes a whole task as one pool, ``chunk_size_for``)."""
        return self.session is not None and self.input_kind in _LENGTH_SORTED_KINDS

    def default_batch_size(self) -> int:
        """Posts per encoder call when the caller gives none: :data:`WORDPIECE_BATCH` for transformer encoders
        (their batches are length-sorted, so small batches pad little), :data:`DEFAULT_BATCH` otherwise."""
        return WORDPIECE_BATCH if self.input_kind in _LENGTH_SORTED_KINDS else DEFAULT_BATCH

    def _dense(
        self,
        posts: Sequence[Post],
        ids: list[list[int]] | None,
        batch_size: int | None,
        max_wordpieces: int | None = None,
    ) -> np.ndarray:
        """Unit vectors [N, D]; ``ids`` (from :meth:`_text_ids`) spare the ``text_ids`` kind a second tokenisation.

        ``wordpiece`` encoders get length-sorted batches (:meth:`_dense_sorted`): the attention mask makes a
        post's vector independent of its batch, and sorting cuts the padding a transformer pays for
        quadratically. Other kinds keep the batches and padding of :func:`semdup.core.inputs.build_inputs`
        (``text_ids`` pads each batch of ``batch_size`` posts to its longest sequence), so the vectors are the
        same either way.
        """
        if not posts:
            return np.zeros((0, self.dimension or 0), dtype=np.float32)
        batch_size = batch_size or self.default_batch_size()
        if self.input_kind in _LENGTH_SORTED_KINDS:
            x = self._dense_sorted(posts, batch_size, max_wordpieces)
        else:
            chunks = []
            for i in range(0, len(posts), batch_size):
                if ids is not None and self.input_kind == "text_ids":
                    arrays = {"ids": pad_sequences(ids[i : i + batch_size], self.pipeline.settings.max_tokens)}
                else:
                    arrays = build_inputs(self.input_kind, self.pipeline, posts[i : i + batch_size])
                chunks.append(self.run_encoder(arrays))
            x = np.concatenate(chunks)
        return _unit(x)

    def _dense_sorted(self, posts: Sequence[Post], batch_size: int, max_wordpieces: int | None = None) -> np.ndarray:
        """Raw vectors [N, D] in the posts' order, encoded in batches of similar length.

        Each window of :data:`_SORT_WINDOW` posts is tokenised once, ordered by wordpiece count (longest first,
        ties in input order), cut into batches of ``batch_size`` each padded only to its own longest post, and
        the outputs are put back in input order. On Travel posts in the indexer's 32-post calls this encodes
        1.6x faster than in-order batches of 64 (``python -m benchmarks.encoding_ratio``);
        the vectors agree to float rounding (≤ 1e-6).
        """
        rows_out: np.ndarray | None = None
        for start in range(0, len(posts), _SORT_WINDOW):
            arrays = build_inputs(self.input_kind, self.pipeline, posts[start : start + _SORT_WINDOW])
            if max_wordpieces is not None:
                arrays = _cut_wordpieces(arrays, max_wordpieces)
            lengths = arrays["attention_mask"].sum(axis=1)
            order = np.argsort(-lengths, kind="stable")
            for i in range(0, len(order), batch_size):
                rows = order[i : i + batch_size]
                width = max(1, int(lengths[rows].max()))
                x = self.run_encoder({name: a[rows, :width] for name, a in arrays.items()})
                if rows_out is None:
                    rows_out = np.empty((len(posts), x.shape[1]), dtype=np.float32)
                rows_out[start + rows] = x
        assert rows_out is not None
        return rows_out

    def encode_dense(self, posts: Sequence[Post], batch_size: int | None = None) -> np.ndarray | None:
        """L2-normalised dense vectors [N, D] float32 (a zero vector stays zero), or None without an encoder.

        ``batch_size``: posts per encoder call (default :meth:`default_batch_size`).

        Raises:
            PostError: a post with neither title nor body, or binary text.
        """
        if self.session is None:
            return None
        for p in posts:
            check_post(p)
        return self._dense(posts, None, batch_size)

    def feature_names(self) -> list[str]:
        """``feature_name`` of every vocabulary token, by id (built once: the indexer asks for it per token)."""
        vocab = self.pipeline.vocab
        cached = self._names_cache
        if cached is None or cached[0] is not vocab:
            cached = self._names_cache = (vocab, [feature_name(t) for t in vocab.itos])
        return cached[1]

    def _term_weights(self, ids: list[list[int]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per post (vocabulary ids, weights float64) of the kept terms, in first-occurrence order (see
        :meth:`encode_terms`)."""
        t = self.term_weights.astype(np.float64)
        tiny = float(np.finfo(np.float32).tiny)  # Lucene's FeatureField refuses subnormal values
        none = (np.zeros(0, dtype=np.int64), np.zeros(0))
        out: list[tuple[np.ndarray, np.ndarray]] = []
        for seq in ids:
            tf = Counter(seq)  # first-occurrence order, as TextPipeline.term_frequencies
            tf.pop(UNK_ID, None)
            tf.pop(PAD_ID, None)
            if not tf:
                out.append(none)
                continue
            keys = np.fromiter(tf.keys(), dtype=np.int64, count=len(tf))
            v = np.fromiter(tf.values(), dtype=np.float64, count=len(tf)) * t[keys]
            norm = float(np.sqrt(np.sum(v * v)))
            if norm <= 0:
                out.append(none)
                continue
            v = v / norm
            keep = v > tiny
            out.append((keys[keep], v[keep]))
        return out

    def _named(self, keys: np.ndarray, weights: np.ndarray) -> dict[str, float]:
        return dict(zip(map(self.feature_names().__getitem__, keys.tolist()), weights.tolist(), strict=True))

    def _terms(self, ids: list[list[int]]) -> list[dict[str, float]]:
        """``{feature name: weight}`` per post from its text ids (see :meth:`encode_terms`)."""
        return [self._named(keys, v) for keys, v in self._term_weights(ids)]

    def encode_terms(self, posts: Sequence[Post]) -> list[dict[str, float]] | None:
        """Per post ``{feature_name(token): (tf·t)_w / ‖tf·t‖}``, only strictly positive weights; None without BOW.

        The norm is over every known token, so for the kept features the sum of query·document products is
        exactly cos_bow (dos Santos et al. 2015, eq. 1) when every t_w > 0. rank_features stores positive
        values only, so tokens with t_w ≤ 0 are dropped: learned t can go below zero (it starts at IDF ≥ 0), and
        then the index-side dot misses those tokens' products. ``manifest["term_weights"]["nonpositive"]``
        counts such tokens (0 for IDF-initialised weights that stayed positive).
        """
        if self.term_weights is None:
            return None
        for p in posts:
            check_post(p)
        return self._terms(self._text_ids(posts))

    def encode_query(
        self, post: Post, max_wordpieces: int | None = None
    ) -> tuple[np.ndarray | None, PackedTerms | None]:
        """One post's (unit dense vector [D] or None, BOW weights or None): ``encode_dense`` and ``encode_terms``
        of ``[post]``, tokenised once (the reranker's query). The weights come as :class:`PackedTerms`: they
        read as the ``encode_terms`` dict and carry the vocabulary ids the fusion matches candidates on.

        ``max_wordpieces``: a transformer encoder reads at most this many wordpieces of the query ([CLS] and [SEP]
        included; the last kept piece becomes [SEP], as the tokenizer's own cut); None: the bundle's limit.

        Raises:
            PostError: a post with neither title nor body, or binary text.
        """
        check_post(post)
        ids = self._shared_text_ids([post])
        dense = None if self.session is None else self._dense([post], ids, 1, max_wordpieces)[0]
        terms = None
        if self.term_weights is not None:
            keys, weights = self._term_weights(ids)[0]
            terms = PackedTerms(weights, ids=keys, feature_names=self.feature_names())
        return dense, terms

    @property
    def uses_title(self) -> bool:
        """True when the fusion has a title term (``beta_title``): posts and queries also get a title vector."""
        return self.session is not None and bool(self.fusion.get(TITLE_WEIGHT))

    def encode_titles(self, posts: Sequence[Post], batch_size: int | None = None) -> list[np.ndarray | None]:
        """Each post's title vector: ``encode_dense`` of the title alone, None for a post without a title."""
        out: list[np.ndarray | None] = [None] * len(posts)
        at, titles = title_posts(posts)
        if titles and self.session is not None:
            for i, v in zip(at, self._dense(titles, None, batch_size), strict=True):
                out[i] = v
        return out

    def document_fields(self, posts: Sequence[Post], batch_size: int | None = None) -> list[dict[str, Any]]:
        """What goes under each index document's ``semdup`` object: ``{"vector", "terms", "term_ids", "model"}``,
        and ``"title_vector"`` (None without a title) when the fusion has a title term (:attr:`uses_title`).

        ``vector`` is a list of floats (None without a dense encoder), ``terms`` the positive BOW weights
        (``{}`` without a BOW path), ``term_ids`` their vocabulary ids in the same order (what the packed copy
        stores), ``model`` this bundle's version. Equal to ``encode_dense``, ``encode_titles`` and
        ``encode_terms``, but each post is tokenised once for all (the indexer's hot path:
        :meth:`prepare_documents` then :meth:`encode_prepared`).

        Raises:
            PostError: a post with neither title nor body, or binary text.
        """
        return self.encode_prepared(self.prepare_documents(posts), batch_size)

    def prepare_documents(self, posts: Sequence[Post]) -> PreparedPosts:
        """Everything :meth:`document_fields` does before the encoder runs: the posts checked, their text ids, and
        for a wordpiece encoder the wordpieces of every text and title (one ``encode_batch`` call, which releases
        the GIL: the indexer prepares the next chunk on a helper thread while this one is encoded).

        Raises:
            PostError: a post with neither title nor body, or binary text.
        """
        from semdup.core.wordpiece import wordpiece_sequences, wordpiece_text

        posts = list(posts)
        for p in posts:
            check_post(p)
        prepared = PreparedPosts(posts, self._shared_text_ids(posts))
        if self.session is not None and self.input_kind in _LENGTH_SORTED_KINDS:
            settings = self.pipeline.settings
            texts = [wordpiece_text(p, settings) for p in posts]
            if self.uses_title:
                prepared.title_at, titles = title_posts(posts)
                texts += [wordpiece_text(t, settings) for t in titles]
            prepared.sequences = wordpiece_sequences(self.pipeline.wordpiece_tokenizer, texts)
        return prepared

    def encode_prepared(self, prepared: PreparedPosts, batch_size: int | None = None,
                        arrays: bool = False) -> list[dict[str, Any]]:
        """:meth:`document_fields` of posts :meth:`prepare_documents` prepared.

        A wordpiece encoder gets every text and title of the posts as one pool of sequences, sorted by length and
        cut into batches (:func:`~semdup.bundle.batching.length_batches`: ``batch_size`` sequences, default
        :data:`STREAM_BATCH` on CPU, :data:`GPU_BATCH_ROWS` with at most :data:`GPU_BATCH_TOKENS` padded
        tokens on CUDA), run ``streams`` at a time; the vectors agree with one-by-one encoding to float rounding.
        ``arrays``: vectors as float32 numpy rows instead of lists of floats (the indexer packs them as they are).
        """
        posts, ids = prepared.posts, prepared.text_ids
        n = len(posts)
        titles: list[np.ndarray | None] | None = None
        if self.session is None:
            dense = None
        elif prepared.sequences is not None:
            both = self._encode_sequences(prepared.sequences, batch_size)
            dense = both[:n]
            if self.uses_title:
                titles = [None] * n
                for i, row in zip(prepared.title_at, both[n:], strict=True):
                    titles[i] = row
        else:
            dense = self._dense(posts, ids, batch_size)
        if titles is None and self.uses_title:
            titles = self.encode_titles(posts, batch_size)
        weighted = None if self.term_weights is None else self._term_weights(ids)
        out = []
        for i in range(n):
            keys, v = weighted[i] if weighted is not None else (None, None)
            entry = {
                "vector": None if dense is None else (dense[i] if arrays else dense[i].tolist()),
                "terms": {} if keys is None else self._named(keys, v),
                "term_ids": [] if keys is None else keys.tolist(),
                "model": self.version,
            }
            if titles is not None:
                title = titles[i]
                entry["title_vector"] = None if title is None else (title if arrays else title.tolist())
            out.append(entry)
        return out

    def _batch_shape(self, batch_size: int | None) -> tuple[int, int | None]:
        """(sequences per batch, padded tokens per batch or None) of the document path on this device."""
        if self.device == "cuda":
            return batch_size or GPU_BATCH_ROWS, GPU_BATCH_TOKENS
        return batch_size or STREAM_BATCH, None

    def _encode_sequences(self, seqs: Sequence[Sequence[int]], batch_size: int | None = None) -> np.ndarray:
        """Unit vectors [N, D] of wordpiece sequences, in their order, encoded in length-sorted batches."""
        dim = int(self.dimension or 0)
        if not seqs:
            return np.zeros((0, dim), dtype=np.float32)
        from semdup.core.wordpiece import pad_id

        rows, tokens = self._batch_shape(batch_size)
        batches = length_batches([len(s) for s in seqs], rows, tokens)
        pad = pad_id(self.pipeline.wordpiece_tokenizer)
        names = input_names(self.input_kind)
        in_order = np.empty((len(seqs), dim), dtype=np.float32)  # rows in encoding order, then put back

        def jobs() -> Any:
            at = 0
            for batch in batches:
                feed = dict(zip(names, pad_rows(seqs, batch, pad), strict=True))
                yield feed, in_order[at : at + len(batch)]
                at += len(batch)

        self.runner.run_into(jobs())
        out = np.empty_like(in_order)
        out[np.concatenate(batches)] = in_order
        return _unit(out)
