"""The fp16 variant of a bundle's encoder: built when the bundle loads, used only where it verifies against fp32.

On a GPU, half-precision matrix products run several times faster than fp32. The variant is not a file of the
bundle: it is converted from ``encoder.onnx`` when the bundle loads (onnxruntime's own converter,
``onnxruntime.transformers.float16``, inputs and the ``vector`` output kept as they are), then verified: both the
fp32 session and the variant's encode the same probe posts (:data:`PROBE_TEXTS`, short to longer than the
encoder reads), and the variant is kept only if the cosine of every probe's two vectors is at least
:data:`FP16_MIN_COSINE`. Loading refuses nothing for it: a variant that fails is dropped (``auto``) with one log
line, or refused as a :class:`~semdup.core.errors.BundleError` when fp16 was demanded (``SEMDUP_FP16=true``).

The tolerance: a cosine of 0.9999 moves a unit vector by at most √(2·10⁻⁴) ≈ 0.014 in L2 (int8 quantisation, which
stays opt-in, moved components by up to 0.071). The Travel default's MiniLM variant gave min cosine 0.9999991 over
the probes (onnxruntime-gpu 1.31.1's converter run by the CPU provider: ``Bundle.load(B, device="cpu",
fp16=True)`` logs it). The bundle's version is unchanged: the vectors an fp16 worker writes are the fp32 vectors
to within this tolerance, as a CUDA kernel's are to within rounding.

Example::

    variant = fp16_model(files["encoder.onnx"])                   # bytes of the converted graph
    check = compare_vectors(fp32_vectors, fp16_vectors)          # VariantCheck(accepted=True, min_cosine=...)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from semdup.core.errors import BundleError
from semdup.core.inputs import build_inputs, input_names
from semdup.core.posts import Post

__all__ = ["FP16_MIN_COSINE", "PROBE_TEXTS", "VariantCheck", "fp16_model", "compare_vectors", "probe_posts",
           "verify_variant", "with_fp16_variant"]

logger = logging.getLogger(__name__)

FP16_MIN_COSINE = 0.9999  # every probe's cosine(fp32 vector, fp16 vector) must reach this
_PROBES_PER_BATCH = 4
_OUTPUT = "vector"
# Forum questions of the kinds the workers see: short titles, code, a URL, long bodies (the last probe joins
# them all, longer than any encoder reads, so the longest sequences are checked too).
PROBE_TEXTS: tuple[tuple[str, str], ...] = (
    ("Visa for Qatar?", ""),
    ("How do I mount a USB drive on Ubuntu 22.04?", "I plugged it in and nothing shows up in the file manager."),
    ("Is tap water safe to drink in Lisbon?", "We are staying for two weeks in August with two small children."),
    ("Python: why does my list change inside the function?",
     "<p>I pass a list and append to it:</p><pre><code>def f(x):\n    x.append(1)</code></pre><p>Why?</p>"),
    ("Transit through Frankfurt without a Schengen visa",
     "My connection is 14 hours. Can I leave the airport? See https://www.auswaertiges-amt.de/ for the rules."),
    ("", "The battery drains overnight even when the laptop is suspended; what can I check before replacing it?"),
    ("Cheapest way from Bangkok to Chiang Mai",
     "Night train, bus or a budget flight? We have large backpacks and are not in a hurry, but we prefer to "
     "sleep well. Which one would you take, and where do you buy the tickets: at the station or online?"),
)


@dataclass(frozen=True)
class VariantCheck:
    """How a variant's vectors compare with fp32's on the probes.

    Attributes:
        accepted: every probe's cosine is at least ``tolerance`` (and finite).
        min_cosine: the smallest cosine (NaN where a vector was not finite).
        tolerance: the cosine every probe had to reach.
        probes: how many vectors were compared.
    """

    accepted: bool
    min_cosine: float
    tolerance: float
    probes: int

    def describe(self) -> str:
        verdict = "within" if self.accepted else "outside"
        return (f"min cosine {self.min_cosine:.7f} over {self.probes} probe posts, {verdict} the tolerance "
                f"(>= {self.tolerance})")


def compare_vectors(reference: np.ndarray, candidate: np.ndarray,
                    min_cosine: float = FP16_MIN_COSINE) -> VariantCheck:
    """Row-wise cosine of two [N, D] arrays: accepted when every row reaches ``min_cosine``.

    A row that is zero in both counts as equal (cosine 1); a non-finite row, or zero in one only, fails.
    """
    a = np.asarray(reference, dtype=np.float64)
    b = np.asarray(candidate, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"the variant gives vectors of shape {b.shape}, fp32 {a.shape}")
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        cos = np.sum(a * b, axis=1) / (na * nb)
    cos = np.where((na == 0) & (nb == 0), 1.0, cos)
    finite = bool(np.isfinite(cos).all())
    low = float(np.min(cos)) if finite and len(cos) else float("nan")
    accepted = finite and len(cos) > 0 and low >= min_cosine
    return VariantCheck(accepted, low, min_cosine, int(len(cos)))


def probe_posts() -> list[Post]:
    """:data:`PROBE_TEXTS` as posts, plus one joining them all (longer than any encoder reads)."""
    posts = [Post(f"probe-{i}", t, b) for i, (t, b) in enumerate(PROBE_TEXTS)]
    everything = " ".join(f"{t} {b}" for t, b in PROBE_TEXTS)
    posts.append(Post("probe-long", "A long post", " ".join([everything] * 4)))
    return posts


def verify_variant(run_reference: Callable[[Mapping[str, np.ndarray]], np.ndarray],
                   run_variant: Callable[[Mapping[str, np.ndarray]], np.ndarray],
                   batches: Sequence[Mapping[str, np.ndarray]],
                   min_cosine: float = FP16_MIN_COSINE) -> VariantCheck:
    """Run both encoders on each input batch and compare (:func:`compare_vectors`); a variant that fails to run
    is not accepted."""
    ref, var = [], []
    for feed in batches:
        ref.append(np.asarray(run_reference(feed), dtype=np.float32))
        try:
            var.append(np.asarray(run_variant(feed), dtype=np.float32))
        except Exception as exc:  # onnxruntime's own types: the variant does not run here
            logger.info("the fp16 variant does not run: %s", str(exc)[:300])
            return VariantCheck(False, float("nan"), min_cosine, 0)
    return compare_vectors(np.concatenate(ref), np.concatenate(var), min_cosine)


def fp16_model(model: bytes) -> bytes:
    """``model`` (an fp32 ONNX graph) with its weights and arithmetic in float16, inputs and outputs kept.

    Raises:
        ImportError: the ``onnx`` package is missing (``semdup[gpu]`` brings it).
    """
    try:
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16
    except ImportError as exc:
        raise ImportError('the fp16 encoder variant needs the onnx package: pip install "semdup[gpu]"') from exc
    converted = convert_float_to_float16(onnx.load_from_string(model), keep_io_types=True)
    return converted.SerializeToString()


def with_fp16_variant(encoder: bytes, manifest: Mapping[str, Any], pipeline: Any, session: Any,
                      providers: list[str], intra_op_threads: int | None, allow_spinning: bool,
                      demanded: bool) -> tuple[Any, str]:
    """(session, precision): the fp16 variant's session on ``providers`` where it verifies against ``session``
    (fp32) on :func:`probe_posts`, else ``session``; one log line either way (what ``Bundle.load`` runs).

    Raises:
        BundleError: ``demanded`` and the variant cannot be built or does not verify.
    """
    from semdup.bundle.verify import make_session

    version, kind = manifest["version"], manifest["input_kind"]
    names = input_names(kind)
    where = "cuda" if providers and providers[0] == "CUDAExecutionProvider" else "cpu"

    def runs(sess: Any) -> Callable[[Mapping[str, np.ndarray]], np.ndarray]:
        return lambda feed: sess.run([_OUTPUT], {n: feed[n] for n in names})[0]

    try:
        variant = make_session(fp16_model(encoder), providers, intra_op_threads, allow_spinning)
    except (ImportError, BundleError) as exc:
        problem = f"it could not be built: {exc}"
    else:
        probes = probe_posts()
        feeds = [build_inputs(kind, pipeline, probes[i : i + _PROBES_PER_BATCH])
                 for i in range(0, len(probes), _PROBES_PER_BATCH)]
        check = verify_variant(runs(session), runs(variant), feeds)
        if check.accepted:
            logger.info("bundle %s encodes with its fp16 variant on %s: %s", version, where, check.describe())
            return variant, "fp16"
        problem = f"its vectors are not fp32's: {check.describe()}"
    if demanded:
        raise BundleError(f"bundle {version}: the fp16 variant was demanded (SEMDUP_FP16=true) but {problem}; set "
                          "SEMDUP_FP16=auto (fp16 where it verifies) or false")
    logger.warning("bundle %s encodes in fp32 on %s: its fp16 variant is not used, %s (fp32 is exact; set "
                   "SEMDUP_FP16=false to skip this check)", version, where, problem)
    return session, "fp32"
