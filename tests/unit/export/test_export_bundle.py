"""Model bundles: tampered or inconsistent bundles are refused, archives round-trip, the serving API is exact."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import tiny_checkpoint  # tests/ is on sys.path (pytest.ini_options.pythonpath)

from semdup.bundle.bundle import Bundle, content_version, file_entry, write_archive
from semdup.core.errors import BundleError, PostError
from semdup.core.posts import Post
from semdup.core.scoring import bow_matrix
from semdup.export.onnx_export import export_checkpoint
from semdup.export.parity import sample_posts
from semdup.index_format.schema import feature_name


@pytest.fixture(scope="module")
def posts() -> list[Post]:
    return sample_posts(24)


@pytest.fixture(scope="module")
def bow_bundle(posts: list[Post], tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("bundle")
    ckpt = tiny_checkpoint("bow-cnn", posts, root / "ckpt")
    return export_checkpoint(ckpt, root / "bow-cnn", archive=True, parity_posts=posts[:8]).bundle_dir


@pytest.fixture()
def copy(bow_bundle: Path, tmp_path: Path) -> Path:
    out = tmp_path / "copy"
    out.mkdir()
    for f in bow_bundle.iterdir():
        (out / f.name).write_bytes(f.read_bytes())
    return out


def reseal(bundle_dir: Path) -> None:
    """Rewrite manifest.json's hashes and version as if a careless tool had re-sealed a changed bundle."""
    path = bundle_dir / "manifest.json"
    m = json.loads(path.read_text())
    m["files"] = {n: file_entry((bundle_dir / n).read_bytes()) for n in m["files"]}
    m["version"] = content_version(m)
    path.write_text(json.dumps(m))


def test_edited_byte_is_refused(copy: Path) -> None:
    data = bytearray((copy / "encoder.onnx").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (copy / "encoder.onnx").write_bytes(bytes(data))
    with pytest.raises(BundleError, match=r"encoder.onnx has sha256 .* but manifest.json says"):
        Bundle.load(copy)


def test_removed_file_is_refused(copy: Path) -> None:
    (copy / "vocab.json").unlink()
    with pytest.raises(BundleError, match="lacks vocab.json"):
        Bundle.load(copy)


def test_mismatched_term_weights_are_refused_naming_both_sizes(copy: Path) -> None:
    t = np.load(copy / "term_weights.npy")
    np.save(copy / "term_weights.npy", t[:-1], allow_pickle=False)
    reseal(copy)
    with pytest.raises(BundleError, match=rf"term_weights.npy has {len(t) - 1} weights but vocab.json has {len(t)}"):
        Bundle.load(copy)


def test_edited_manifest_fusion_is_refused(copy: Path) -> None:
    m = json.loads((copy / "manifest.json").read_text())
    m["fusion"]["beta_bow"] = 5.0
    (copy / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match="hashes to"):
        Bundle.load(copy)


def test_encoder_of_another_vocabulary_is_refused(copy: Path, posts: list[Post], tmp_path: Path) -> None:
    other = tiny_checkpoint("bow-cnn", posts[:6], tmp_path / "small")  # a smaller vocabulary
    small = export_checkpoint(other, tmp_path / "small-bundle", parity_posts=posts[:2]).bundle_dir
    (copy / "encoder.onnx").write_bytes((small / "encoder.onnx").read_bytes())
    reseal(copy)
    with pytest.raises(BundleError, match="refuses id"):
        Bundle.load(copy)


def test_wrong_input_names_are_refused(copy: Path) -> None:
    m = json.loads((copy / "manifest.json").read_text())
    m["input_kind"], m["input_names"] = "title_body_ids", ["title_ids", "body_ids"]
    m["version"] = content_version(m)
    (copy / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match=r"takes inputs \['ids'\] but input kind 'title_body_ids'"):
        Bundle.load(copy)


def test_not_a_bundle(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="no model bundle"):
        Bundle.load(tmp_path / "missing")
    (tmp_path / "junk.tar.gz").write_bytes(b"\x00\x01not an archive")
    with pytest.raises(BundleError, match="neither a bundle directory nor a readable"):
        Bundle.load(tmp_path / "junk.tar.gz")
    with pytest.raises(BundleError, match="no manifest.json"):
        Bundle.load(tmp_path)


def test_archive_member_escaping_the_bundle_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "evil.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("../../etc/passwd")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    with pytest.raises(BundleError, match="not a plain bundle file"):
        Bundle.load(path)


def test_archive_round_trip(bow_bundle: Path, posts: list[Post], tmp_path: Path) -> None:
    archive = Path(str(bow_bundle) + ".tar.gz")
    from_dir, from_archive = Bundle.load(bow_bundle), Bundle.load(archive)
    assert from_archive.version == from_dir.version and from_archive.path == archive
    # the same model bytes and session settings on the same posts: the same arithmetic, bit-equal on any CPU
    np.testing.assert_array_equal(from_archive.encode_dense(posts), from_dir.encode_dense(posts))
    assert from_archive.encode_terms(posts) == from_dir.encode_terms(posts)
    again = write_archive(bow_bundle, tmp_path / "again.tar.gz")
    assert again.read_bytes() == archive.read_bytes()  # reproducible archive


def test_encode_terms_is_the_normalised_learned_bow(bow_bundle: Path, posts: list[Post]) -> None:
    bundle = Bundle.load(bow_bundle)
    terms = bundle.encode_terms(posts)
    rows = bow_matrix(bundle.pipeline, posts, bundle.term_weights)
    itos = bundle.pipeline.vocab.itos
    for i, post_terms in enumerate(terms):
        row = rows.getrow(i)
        expected = {feature_name(itos[j]): v for j, v in zip(row.indices, row.data, strict=True) if v > 0}
        assert post_terms.keys() == expected.keys()
        for k, v in expected.items():
            assert post_terms[k] == pytest.approx(v, rel=1e-6)
    # all t > 0 here, so the rank_features dot product of two posts is cos_bow
    dot = sum(w * terms[1].get(k, 0.0) for k, w in terms[0].items())
    assert dot == pytest.approx(float((rows[0] @ rows[1].T).toarray()[0, 0]), abs=1e-9)


def test_non_positive_term_weights_are_left_out(bow_bundle: Path, posts: list[Post]) -> None:
    bundle = Bundle.load(bow_bundle)
    tokens = bundle.pipeline.text_tokens(posts[0])
    first = bundle.pipeline.vocab.stoi[tokens[0]]
    bundle.term_weights = bundle.term_weights.copy()
    bundle.term_weights[first] = -0.5
    terms = bundle.encode_terms(posts[:1])[0]
    assert feature_name(tokens[0]) not in terms and all(w > 0 for w in terms.values())


def test_document_fields(bow_bundle: Path, posts: list[Post]) -> None:
    bundle = Bundle.load(bow_bundle)
    docs = bundle.document_fields(posts[:3])
    assert [set(d) for d in docs] == [{"vector", "terms", "term_ids", "model"}] * 3
    assert all([bundle.feature_names()[i] for i in d["term_ids"]] == list(d["terms"]) for d in docs)
    assert all(d["model"] == bundle.version and len(d["vector"]) == bundle.dimension for d in docs)
    json.dumps(docs)  # JSON-native, as the bulk writer sends it
    with pytest.raises(PostError, match="neither title nor body"):
        bundle.document_fields([Post("empty", "", "  ")])


def test_encode_query_is_encode_dense_and_encode_terms_of_one_post(bow_bundle: Path, posts: list[Post]) -> None:
    bundle = Bundle.load(bow_bundle)
    for post in posts[:3]:
        vector, terms = bundle.encode_query(post)
        np.testing.assert_array_equal(vector, bundle.encode_dense([post])[0])
        assert terms == bundle.encode_terms([post])[0]
    with pytest.raises(PostError, match="neither title nor body"):
        bundle.encode_query(Post("empty", "", "  "))


def test_serving_side_never_imports_torch(bow_bundle: Path) -> None:
    code = (
        "import sys; from semdup.bundle import Bundle, BundleScorer; from semdup.core.posts import Post\n"
        f"b = BundleScorer.load({str(bow_bundle)!r}); b.score(Post('q', 'mount usb', ''), [Post('c', 'usb', '')])\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\nprint(b.version)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == Bundle.load(bow_bundle).version


def test_cli_exports_and_reports(bow_bundle: Path, tmp_path: Path) -> None:
    ckpt = bow_bundle.parent / "ckpt"
    cmd = [sys.executable, "-m", "semdup", "export", "--checkpoint", str(ckpt), "--out", str(tmp_path / "b"),
           "--archive", "--parity-count", "6", "--threads", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"version      {Bundle.load(bow_bundle).version}" in out.stdout
    assert (tmp_path / "b.tar.gz").exists()
    bad = subprocess.run([sys.executable, "-m", "semdup", "export", "--checkpoint", str(tmp_path), "--out",
                          str(tmp_path / "c")], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and "Error:" in bad.stderr and "not a semdup checkpoint" in bad.stderr


def test_int8_bundle_ships_its_measured_map_change(posts: list[Post], tmp_path: Path) -> None:
    ckpt = tiny_checkpoint("cnn", posts, tmp_path / "ckpt")
    result = export_checkpoint(ckpt, tmp_path / "int8", quantize="int8", parity_posts=posts[:4])
    q = Bundle.load(result.bundle_dir).manifest["quantization"]
    assert q["mode"] == "int8" and q["bytes_int8"] < q["bytes_fp32"]
    assert q["map_change"] == pytest.approx(q["map_int8"] - q["map_fp32"])
    assert 0.0 <= q["map_fp32"] <= 100.0 and 0.0 <= q["map_int8"] <= 100.0
    assert result.version != export_checkpoint(ckpt, tmp_path / "fp32", parity_posts=posts[:4]).version
