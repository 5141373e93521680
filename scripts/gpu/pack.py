"""Carry files to a GPU machine that takes at most 64 MiB per call and has no network (stdlib only).

    python scripts/gpu/pack.py requirements --exclude-file scripts/gpu/present.txt --local semdup semdup[gpu]
    python scripts/gpu/pack.py split STAGE_DIR OUT_DIR [--part-mb 56]     # STAGE as a tar in parts + manifest
    python scripts/gpu/pack.py join PARTS_DIR STAGE_DIR                    # verify every sha256, reassemble, unpack

``requirements`` prints ``name==version`` for the distributions a requirement needs, its dependencies' own
dependencies included, as installed in this environment (their cp312 wheels are then fetched with ``pip
download``), leaving out the ones the GPU machine has already (``--exclude-file``: one name a line) and the
``--local`` roots themselves (semdup: the checkout travels).
``split`` writes ``part-000``, ``part-001``... of at most ``--part-mb`` MiB and ``manifest.json`` (each part's
and the whole tar's sha256 and size); ``join`` refuses a missing, short or changed part, naming it.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import sys
import tarfile
from importlib import metadata
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
_CHUNK = 1 << 20


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _marker_holds(requirement: Any, extras: set[str], python: str) -> bool:
    """Whether the requirement's marker holds on Linux x86-64 CPython ``python`` (e.g. "3.12") for ``extras``."""
    if requirement.marker is None:
        return True
    env = {"python_version": python, "python_full_version": python + ".0", "sys_platform": "linux",
           "platform_system": "Linux", "os_name": "posix", "platform_machine": "x86_64",
           "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    return any(requirement.marker.evaluate({**env, "extra": e}) for e in (extras or {""}))


def closure(roots: list[str], exclude: set[str], python: str = "3.12") -> dict[str, str]:
    """``{name: version}`` of every installed distribution the ``roots`` need, less ``exclude`` (and what only an
    excluded one needs)."""
    from packaging.requirements import Requirement  # pip's own dependency, present wherever pip is

    found: dict[str, str] = {}
    todo = [(r.name, sorted(r.extras)) for r in map(Requirement, roots)]
    while todo:
        name, extras = todo.pop()
        key = canonical(name)
        if key in exclude:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"{name} is needed but not installed here; install it, or list it in the exclude file")
        found[key] = dist.version
        wanted = {canonical(e) for e in extras}
        for text in dist.requires or []:
            dep = Requirement(text)
            if _marker_holds(dep, wanted, python) and (canonical(dep.name) not in found or dep.extras):
                todo.append((dep.name, sorted(dep.extras)))
    return found


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def split(stage: Path, out: Path, part_mb: int) -> dict:
    """``stage`` as one uncompressed tar (its members are compressed already), cut into parts in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("part-*"):
        old.unlink()
    tar_path = out / "stage.tar"
    with tarfile.open(tar_path, "w") as tar:
        for path in sorted(stage.rglob("*")):
            if path.is_file():
                tar.add(path, arcname=str(path.relative_to(stage)))
    size = part_mb << 20
    parts = []
    with tar_path.open("rb") as fh:
        for i, block in enumerate(iter(lambda: fh.read(size), b"")):
            part = out / f"part-{i:03d}"
            part.write_bytes(block)
            parts.append({"name": part.name, "bytes": len(block), "sha256": hashlib.sha256(block).hexdigest()})
    manifest = {"tar_bytes": tar_path.stat().st_size, "tar_sha256": _sha256(tar_path), "parts": parts}
    tar_path.unlink()
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return manifest


def join(parts_dir: Path, stage: Path) -> dict:
    """Check each part against the manifest, reassemble the tar and unpack it into ``stage``."""
    manifest = json.loads((parts_dir / MANIFEST).read_text(encoding="utf-8"))
    whole = hashlib.sha256()
    buf = io.BytesIO()
    for entry in manifest["parts"]:
        part = parts_dir / entry["name"]
        if not part.is_file():
            raise SystemExit(f"{part} is missing: send it (see scripts/gpu/README.md), then run this again")
        data = part.read_bytes()
        if len(data) != entry["bytes"] or hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise SystemExit(f"{part} has {len(data)} bytes and another sha256 than the manifest's: send it again")
        whole.update(data)
        buf.write(data)
    if whole.hexdigest() != manifest["tar_sha256"]:
        raise SystemExit("the reassembled parts do not hash to the manifest's tar_sha256: send them again")
    buf.seek(0)
    stage.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=buf, mode="r:") as tar:
        for member in tar.getmembers():
            if member.name.startswith("/") or ".." in Path(member.name).parts or not member.isfile():
                raise SystemExit(f"the stage tar holds {member.name!r}, which is not a plain relative file")
        tar.extractall(stage)
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    req = sub.add_parser("requirements")
    req.add_argument("roots", nargs="+")
    req.add_argument("--exclude-file", type=Path)
    req.add_argument("--python", default="3.12")
    req.add_argument("--local", action="append", default=[], help="a root that travels as source: its needs are "
                     "listed, not itself")
    sp = sub.add_parser("split")
    sp.add_argument("stage", type=Path)
    sp.add_argument("out", type=Path)
    sp.add_argument("--part-mb", type=int, default=56)
    jn = sub.add_parser("join")
    jn.add_argument("parts", type=Path)
    jn.add_argument("stage", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "requirements":
        exclude = set()
        if args.exclude_file:
            lines = args.exclude_file.read_text(encoding="utf-8").splitlines()
            exclude = {canonical(x.split("#")[0].strip()) for x in lines if x.split("#")[0].strip()}
        local = {canonical(x) for x in args.local}
        for name, version in sorted(closure(args.roots, exclude - local, args.python).items()):
            if name not in local:
                print(f"{name}=={version}")
    elif args.cmd == "split":
        m = split(args.stage, args.out, args.part_mb)
        print(f"{len(m['parts'])} parts, {m['tar_bytes'] / 2**20:.1f} MiB in all, in {args.out}")
    else:
        m = join(args.parts, args.stage)
        print(f"joined {len(m['parts'])} parts ({m['tar_bytes'] / 2**20:.1f} MiB) into {args.stage}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
