"""The numeric unit tests once more on a second CPU path, in a child process, so that an exact float comparison that
holds only on this CPU fails here and not on a user's machine (issue #35: Platt's Newton fit compared with ``==``
passed on an AVX-512 Xeon and failed on an AMD EPYC, 3e-16 apart).

The child runs :data:`NUMERIC` (fits, measures, fusion, calibration, the gate, encoding equalities) with
:func:`second_path`'s settings:

* numpy's SIMD dispatch one level down: without the AVX-512 targets on a machine that has them (the path an AVX2
  machine such as an AMD EPYC takes), else without any dispatched target (numpy's baseline path).
  ``NPY_DISABLE_CPU_FEATURES`` takes the installed numpy's own names (2.4 calls AVX-512 ``X86_V4``; 1.26 to 2.3
  ``AVX512F``, ``AVX512_SKX`` ...), and a name numpy does not dispatch is only an ImportWarning, so the names are
  read from numpy and the child checks that they are off before it runs a test;
* OpenBLAS, torch, MKL and oneDNN capped at the same level (``OPENBLAS_CORETYPE``, ``ATEN_CPU_CAPABILITY``,
  ``MKL_ENABLE_INSTRUCTIONS``, ``ONEDNN_MAX_CPU_ISA``);
* one thread: OpenMP, MKL and OpenBLAS, semdup's onnxruntime settings, and every onnxruntime session the tests open
  without a thread count (onnxruntime has no variable for it).

onnxruntime's own kernels follow the CPU and cannot be capped; the README says how its figures were checked on an
emulated AVX2 CPU.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

NUMERIC = (
    "tests/unit/measures/test_fitting.py",
    "tests/unit/measures/test_ranking.py",
    "tests/unit/measures/test_protocols.py",
    "tests/unit/measures/test_significance.py",
    "tests/unit/experiments/test_alerts_eval_units.py",
    "tests/unit/experiments/test_flag_curve.py",
    "tests/unit/benchmarks/test_similar_eval.py",
    "tests/unit/learn/test_gate.py",
    "tests/unit/reranker/test_reranker_units.py",
    "tests/unit/reranker/test_title_term.py",
    "tests/unit/reranker/test_one_round_trip.py",
    "tests/unit/review/test_review_calibrate_units.py",
    "tests/unit/review/test_review_chart.py",
    "tests/unit/alerts/test_flag_choice.py",
    "tests/unit/bundle/test_bundle_sorted_encoding.py",
    "tests/unit/bundle/test_length_batching.py",
    "tests/unit/training/test_in_batch_loss.py",
)

ONE_THREAD = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "SEMDUP_ONNX_THREADS": "1",
    "SEMDUP_ENCODE_THREADS": "1",
}

# The child: check that numpy took the settings, give onnxruntime sessions one thread, run pytest on the files.
CHILD = """
import os, sys
try:
    from numpy._core._multiarray_umath import __cpu_features__ as features
except ImportError:  # numpy < 2
    from numpy.core._multiarray_umath import __cpu_features__ as features
still_on = [f for f in os.environ.get("NPY_DISABLE_CPU_FEATURES", "").split() if features.get(f)]
if still_on:
    sys.exit(f"numpy still dispatches {still_on}: NPY_DISABLE_CPU_FEATURES was not applied")
import onnxruntime as ort
class _OneThread(ort.InferenceSession):
    def __init__(self, model, sess_options=None, *args, **kwargs):
        sess_options = sess_options or ort.SessionOptions()
        sess_options.intra_op_num_threads = sess_options.intra_op_num_threads or 1
        super().__init__(model, sess_options, *args, **kwargs)
ort.InferenceSession = _OneThread
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


def second_path() -> dict[str, str]:
    """The environment of a CPU path below this machine's best, and one thread (module doc)."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__ as dispatch
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # numpy < 2
        from numpy.core._multiarray_umath import __cpu_dispatch__ as dispatch
        from numpy.core._multiarray_umath import __cpu_features__ as features
    present = [f for f in dispatch if features.get(f)]
    avx512 = [f for f in present if f.startswith("AVX512") or f == "X86_V4"]
    env = dict(ONE_THREAD)
    if avx512:  # the AVX2 path
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(avx512)
        caps = {"OPENBLAS_CORETYPE": "Haswell", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                "ONEDNN_MAX_CPU_ISA": "AVX2"}
    else:  # numpy's baseline path (SSE4.2 on x86-64)
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(present)
        caps = {"OPENBLAS_CORETYPE": "Nehalem", "ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
                "ONEDNN_MAX_CPU_ISA": "SSE41"}
    if platform.machine().lower() in ("x86_64", "amd64"):
        env.update(caps)
    return env


def test_the_numeric_tests_pass_on_a_second_cpu_path() -> None:
    env = {**os.environ, **second_path()}
    cmd = [sys.executable, "-c", CHILD, "-p", "no:cacheprovider", "-q", "--no-header", *NUMERIC]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (
        f"the numeric tests failed with {' '.join(f'{k}={v}' for k, v in second_path().items())}:\n"
        + proc.stdout[-6000:] + proc.stderr[-3000:]
    )
