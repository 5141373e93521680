"""The fp16 variant's verification: kept within the cosine tolerance, refused beyond it, on real (tiny) ONNX models.

The variant is built with onnxruntime's own converter and run by the CPU provider here; on a GPU the same check
runs on CUDA when the bundle loads.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from tiny_onnx import tiny_wordpiece_bundle

from semdup.bundle.bundle import Bundle
from semdup.bundle.fp16 import FP16_MIN_COSINE, compare_vectors, fp16_model, probe_posts, verify_variant
from semdup.core.errors import BundleError

pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fp16")
    return {"fits": tiny_wordpiece_bundle(root / "fits"), "overflows": tiny_wordpiece_bundle(root / "big", scale=1e5)}


def test_compare_vectors_accepts_within_the_tolerance_and_refuses_beyond() -> None:
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((20, 8)).astype(np.float32)
    close = ref + 1e-4 * rng.standard_normal(ref.shape).astype(np.float32)
    check = compare_vectors(ref, close)
    assert check.accepted and check.min_cosine >= FP16_MIN_COSINE and check.probes == 20
    far = ref.copy()
    far[3] += 0.1 * np.linalg.norm(far[3])  # one probe off by 10 %: cosine about 0.995
    check = compare_vectors(ref, far)
    assert not check.accepted and check.min_cosine < FP16_MIN_COSINE
    assert "outside the tolerance" in check.describe()


def test_non_finite_or_one_sided_zero_vectors_are_refused_and_two_zeros_agree() -> None:
    ref = np.ones((3, 4), dtype=np.float32)
    bad = ref.copy()
    bad[1, 2] = np.inf
    assert not compare_vectors(ref, bad).accepted
    one_zero = ref.copy()
    one_zero[0] = 0
    assert not compare_vectors(ref, one_zero).accepted
    both = ref.copy()
    both[0] = 0
    assert compare_vectors(both, both.copy()).accepted
    with pytest.raises(ValueError, match="shape"):
        compare_vectors(ref, ref[:, :2])


def test_the_probes_cover_short_and_longer_than_any_encoder_reads() -> None:
    posts = probe_posts()
    lengths = [len(p.title) + len(p.body) for p in posts]
    assert min(lengths) < 20 and max(lengths) > 2000 and len({p.id for p in posts}) == len(posts)


def _runs(model: bytes) -> object:
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return lambda feed: session.run(["vector"], dict(feed))[0]


def _feeds(bundle: Bundle) -> list[dict[str, np.ndarray]]:
    from semdup.core.inputs import build_inputs

    posts = probe_posts()
    return [build_inputs("wordpiece", bundle.pipeline, posts[i : i + 4]) for i in range(0, len(posts), 4)]


def test_a_real_fp16_conversion_verifies_and_an_overflowing_one_does_not(bundles: dict[str, Path]) -> None:
    for name, expected in (("fits", True), ("overflows", False)):
        fp32 = (bundles[name] / "encoder.onnx").read_bytes()
        bundle = Bundle.load(bundles[name])
        check = verify_variant(_runs(fp32), _runs(fp16_model(fp32)), _feeds(bundle))
        assert check.accepted is expected, (name, check)
        assert check.probes == len(probe_posts())


def test_a_variant_that_does_not_run_is_not_accepted(bundles: dict[str, Path]) -> None:
    def broken(feed: object) -> np.ndarray:
        raise RuntimeError("no kernel for MatMul(float16)")

    fp32 = (bundles["fits"] / "encoder.onnx").read_bytes()
    check = verify_variant(_runs(fp32), broken, _feeds(Bundle.load(bundles["fits"])))
    assert not check.accepted and check.probes == 0


def test_the_bundle_uses_fp16_only_where_it_verifies(
    bundles: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    fp32 = Bundle.load(bundles["fits"])
    assert fp32.precision == "fp32"  # CPU and fp16 unset: no variant is built
    with caplog.at_level(logging.INFO, logger="semdup.bundle"):
        fp16 = Bundle.load(bundles["fits"], fp16=True)
    assert fp16.precision == "fp16" and fp16.version == fp32.version
    assert any("encodes with its fp16 variant" in r.getMessage() for r in caplog.records)
    posts = probe_posts()
    check = compare_vectors(fp32.encode_dense(posts), fp16.encode_dense(posts))
    assert check.accepted, check
    with pytest.raises(BundleError, match="fp16 variant was demanded .* outside the tolerance"):
        Bundle.load(bundles["overflows"], fp16=True)
    assert Bundle.load(bundles["overflows"], fp16=False).precision == "fp32"


def test_under_auto_a_variant_that_fails_leaves_fp32_with_one_warning(
    bundles: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """What a CUDA worker with SEMDUP_FP16 unset does with a variant that does not verify (run here on CPU)."""
    from semdup.bundle.fp16 import with_fp16_variant

    bundle = Bundle.load(bundles["overflows"])
    encoder = (bundles["overflows"] / "encoder.onnx").read_bytes()
    with caplog.at_level(logging.INFO, logger="semdup.bundle.fp16"):
        session, precision = with_fp16_variant(encoder, bundle.manifest, bundle.pipeline, bundle.session,
                                               ["CPUExecutionProvider"], 1, False, demanded=False)
    assert session is bundle.session and precision == "fp32"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "fp16 variant is not used" in warnings[0].getMessage()
