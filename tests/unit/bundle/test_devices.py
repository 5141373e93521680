"""The encoder's device, on a CPU-only machine: provider choice, the fallback and its one log line, cuda refused.

CI has the CPU build of onnxruntime and no GPU, so the GPU side is simulated where it must be (what
``cuda_problem`` sees, a CUDA provider that fails to build the session); the sessions are real onnxruntime ones
over a real (tiny) bundle.
"""

from __future__ import annotations

import logging
from pathlib import Path

import onnxruntime as ort
import pytest
from tiny_onnx import tiny_wordpiece_bundle

from semdup.bundle import devices
from semdup.bundle.bundle import Bundle
from semdup.bundle.devices import CPU, CUDA, DeviceChoice, choose_device, cuda_problem, session_fallback
from semdup.bundle.verify import make_session
from semdup.core.errors import ConfigError

NO_GPU = "no NVIDIA GPU is visible (test)"


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_wordpiece_bundle(tmp_path_factory.mktemp("devices") / "tiny")


def _fallback_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "semdup.bundle.devices"]


def test_cpu_is_cpu_alone_whatever_is_installed() -> None:
    choice = choose_device("cpu", problem=None)
    assert (choice.device, choice.providers, choice.reason, choice.fell_back) == ("cpu", (CPU,), None, False)


def test_auto_puts_cuda_first_where_it_can_be_used() -> None:
    choice = choose_device("auto", problem=None)
    assert choice.device == "cuda" and choice.providers == (CUDA, CPU) and not choice.fell_back


def test_auto_falls_back_to_cpu_with_the_reason() -> None:
    choice = choose_device("AUTO", problem=NO_GPU)
    assert choice.device == "cpu" and choice.providers == (CPU,) and choice.reason == NO_GPU and choice.fell_back


def test_cuda_without_cuda_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as info:
        choose_device("cuda", problem=NO_GPU)
    message = str(info.value)
    assert "\n" not in message and "device cuda cannot be used" in message and NO_GPU in message
    assert "auto or cpu" in message  # what to do


def test_an_unknown_device_lists_the_accepted_ones() -> None:
    with pytest.raises(ValueError, match="accepted: auto, cpu, cuda"):
        choose_device("tpu")


def test_cuda_problem_names_each_reason() -> None:
    gpu = [CUDA, CPU]
    assert "CPU build" in cuda_problem([CPU], {}, lambda _: True)
    assert "hides every GPU" in cuda_problem(gpu, {"CUDA_VISIBLE_DEVICES": ""}, lambda _: True)
    assert "hides every GPU" in cuda_problem(gpu, {"CUDA_VISIBLE_DEVICES": "-1"}, lambda _: True)
    assert "/dev/nvidiactl" in cuda_problem(gpu, {}, lambda _: False)
    assert cuda_problem(gpu, {"CUDA_VISIBLE_DEVICES": "0"}, lambda _: True) is None


def test_this_machine_has_the_cpu_build() -> None:
    """CI's own case: the CPU build of onnxruntime, so auto is CPU and says why at info level."""
    if CUDA in ort.get_available_providers():
        pytest.skip("onnxruntime-gpu is installed here")
    choice = choose_device("auto")
    assert choice.device == "cpu" and not choice.gpu_build and "CPU build" in choice.reason


def test_a_session_without_the_cuda_provider_falls_back_under_auto_and_is_refused_under_cuda() -> None:
    asked_auto = DeviceChoice("auto", "cuda", (CUDA, CPU), gpu_build=True)
    got = session_fallback(asked_auto, [CPU], "libcublasLt.so.13: cannot open shared object file")
    assert got.device == "cpu" and got.fell_back and "libcublasLt.so.13" in got.reason
    assert session_fallback(asked_auto, [CUDA, CPU]) is asked_auto
    with pytest.raises(ConfigError, match="device cuda cannot be used"):
        session_fallback(DeviceChoice("cuda", "cuda", (CUDA, CPU), gpu_build=True), [CPU])


def test_the_bundle_loads_on_cpu_and_says_so_once_on_the_cpu_build(
    bundle_dir: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    cpu_build = "onnxruntime has no CUDA provider (the CPU build is installed)"
    monkeypatch.setattr(devices, "cuda_problem", lambda: cpu_build)
    with caplog.at_level(logging.INFO, logger="semdup.bundle"):
        bundle = Bundle.load(bundle_dir)
    assert bundle.device == "cpu" and bundle.session.get_providers() == [CPU]
    lines = _fallback_lines(caplog)
    assert len(lines) == 1 and lines[0].levelno == logging.INFO and "encodes on CPU" in lines[0].getMessage()


def test_a_gpu_build_whose_cuda_provider_does_not_start_falls_back_with_one_warning(
    bundle_dir: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """onnxruntime-gpu and a GPU as far as the checks see, but the session comes up on CPU (on this CPU build it
    cannot do otherwise: what onnxruntime-gpu does when its CUDA libraries are missing)."""
    monkeypatch.setattr(devices, "cuda_problem", lambda: None)
    with caplog.at_level(logging.INFO, logger="semdup.bundle"):
        bundle = Bundle.load(bundle_dir, device="auto")
    assert bundle.device == "cpu" and bundle.precision == "fp32"
    lines = _fallback_lines(caplog)
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    text = lines[0].getMessage()
    assert "encodes on CPU, CUDA cannot be used" in text and "SEMDUP_DEVICE=cpu" in text and "\n" not in text
    with pytest.raises(ConfigError, match="device cuda cannot be used"):
        Bundle.load(bundle_dir, device="cuda")


def test_a_cuda_session_that_raises_leaves_a_cpu_session_and_the_error(
    bundle_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = ort.InferenceSession

    def failing(model: bytes, sess_options: object = None, providers: list[str] | None = None, **kw: object) -> object:
        if providers and CUDA in providers:
            raise RuntimeError("CUDA failure 35: CUDA driver version is insufficient for CUDA runtime version")
        return real(model, sess_options=sess_options, providers=providers, **kw)

    monkeypatch.setattr(ort, "InferenceSession", failing)
    errors: list[str] = []
    session = make_session((bundle_dir / "encoder.onnx").read_bytes(), [CUDA, CPU], 1, cuda_errors=errors)
    assert session.get_providers() == [CPU] and "driver version is insufficient" in errors[0]
    choice = session_fallback(DeviceChoice("auto", "cuda", (CUDA, CPU), gpu_build=True), [CPU], errors[0])
    assert "driver version is insufficient" in choice.reason


def test_semdup_worker_device_cuda_is_refused_in_one_line(
    bundle_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from semdup.cli import main

    monkeypatch.setattr(devices, "cuda_problem", lambda: NO_GPU)
    with pytest.raises(SystemExit) as exited:
        main(["worker", "--bundle", str(bundle_dir), "--device", "cuda"])
    assert exited.value.code == 1
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        f"Error: device cuda cannot be used: {NO_GPU}; run with device auto or cpu (SEMDUP_DEVICE)"
    ]


def test_semdup_worker_never_starts_cuda_before_the_pool_forks(
    bundle_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CUDA context does not survive fork: the CLI checks the device without a session and verifies the bundle on
    CPU; each pool process loads its own CUDA session."""
    import semdup.apps.worker as worker_app
    from semdup.cli import main

    monkeypatch.setattr(devices, "cuda_problem", lambda: None)  # a GPU, as far as the checks see
    calls: list[dict[str, object]] = []

    def spy(settings: object, path: str, **kw: object) -> object:
        calls.append(kw)
        raise SystemExit(3)  # stop before the cluster and the broker

    monkeypatch.setattr(worker_app, "load_worker_bundle", spy)
    with pytest.raises(SystemExit) as exited:
        main(["worker", "--bundle", str(bundle_dir), "--device", "cuda", "-c", "2"])
    assert exited.value.code == 3 and calls == [{"device": "cpu", "fp16": False}]
