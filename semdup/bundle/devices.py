"""Which onnxruntime execution provider a bundle's encoder runs on: the ``auto | cpu | cuda`` setting.

``SEMDUP_DEVICE`` (``worker.device`` in the settings tree; ``semdup worker --device``) picks it:

* ``cpu``: onnxruntime's CPU provider, whatever is installed.
* ``cuda``: the CUDA provider, or nothing: where it cannot be used the bundle does not load, with one
  :class:`~semdup.core.errors.ConfigError` line that says why (so a GPU worker never quietly encodes on CPU).
* ``auto`` (the default): CUDA where it can be used, else CPU. A worker that falls back says so in ONE log line,
  a warning where the GPU build of onnxruntime is installed (CUDA was expected: the line says why it is not used
  and what to check), an info line on the CPU build (CPU is what that install is for).

CUDA "can be used" when onnxruntime offers ``CUDAExecutionProvider`` (the ``semdup[gpu]`` extra,
onnxruntime-gpu), a GPU is visible (``/dev/nvidiactl`` exists and ``CUDA_VISIBLE_DEVICES`` hides none of them
all), and the session onnxruntime builds really holds the provider: onnxruntime-gpu starts without CUDA when its
CUDA or cuDNN libraries are missing, which only the built session shows (:func:`session_fallback`).

Example::

    choice = choose_device("auto")           # DeviceChoice(device="cpu", providers=[...], reason="...")
    session = make_session(model, choice.providers, ...)
    choice = session_fallback(choice, session.get_providers())   # CUDA asked, CPU got: the reason, or raises
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from semdup.core.errors import ConfigError

__all__ = [
    "DEVICES",
    "CUDA",
    "CPU",
    "DeviceChoice",
    "check_device",
    "cuda_problem",
    "choose_device",
    "session_fallback",
    "log_choice",
]

logger = logging.getLogger(__name__)

DEVICES = ("auto", "cpu", "cuda")
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
_GPU_DEVICE_FILE = "/dev/nvidiactl"
_INSTALL_GPU = 'pip install "semdup[gpu]" (onnxruntime-gpu) instead of semdup[serve]/[cpu]'


@dataclass(frozen=True)
class DeviceChoice:
    """What a bundle's session runs on.

    Attributes:
        asked: the setting (``auto``, ``cpu`` or ``cuda``).
        device: ``cuda`` or ``cpu``, what the providers put first.
        providers: onnxruntime providers, in order of preference.
        reason: why CUDA is not used where ``auto`` would have used it (None: CUDA used, or CPU asked for).
        gpu_build: whether onnxruntime offers the CUDA provider (onnxruntime-gpu is installed).
    """

    asked: str
    device: str
    providers: tuple[str, ...]
    reason: str | None = None
    gpu_build: bool = False

    @property
    def fell_back(self) -> bool:
        return self.asked == "auto" and self.device == "cpu" and self.reason is not None


def check_device(device: str) -> str:
    """``device`` lower-cased, or ValueError naming the accepted values."""
    value = str(device).strip().lower()
    if value not in DEVICES:
        raise ValueError(f"unknown device {device!r}; accepted: {', '.join(DEVICES)}")
    return value


def _available_providers() -> list[str]:
    import onnxruntime as ort

    return list(ort.get_available_providers())


def cuda_problem(
    available: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    device_file_exists: Callable[[str], bool] = os.path.exists,
) -> str | None:
    """Why onnxruntime's CUDA provider cannot be used here, or None when it can be tried.

    Args:
        available: onnxruntime's available providers (default: asked of onnxruntime).
        environ: the environment (``CUDA_VISIBLE_DEVICES``; default ``os.environ``, read by the caller's process).
        device_file_exists: tests whether the NVIDIA driver's device file exists.
    """
    available = _available_providers() if available is None else list(available)
    environ = os.environ if environ is None else environ
    if CUDA not in available:
        return f"onnxruntime has no CUDA provider (the CPU build is installed; for a GPU: {_INSTALL_GPU})"
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
    if not device_file_exists(_GPU_DEVICE_FILE):
        return (
            f"no NVIDIA GPU is visible ({_GPU_DEVICE_FILE} is missing: no driver, or a container started "
            "without --gpus / the nvidia.com/gpu resource)"
        )
    return None


def choose_device(device: str = "auto", problem: str | None | bool = False) -> DeviceChoice:
    """The providers for the ``device`` setting (module doc).

    Args:
        device: ``auto``, ``cpu`` or ``cuda``.
        problem: what :func:`cuda_problem` says (False: ask it here).

    Raises:
        ValueError: an unknown device.
        ConfigError: ``cuda`` where CUDA cannot be used (one line: why, and what to do).
    """
    asked = check_device(device)
    if asked == "cpu":
        return DeviceChoice(asked, "cpu", (CPU,))
    reason = cuda_problem() if problem is False else problem
    gpu_build = reason is None or "CPU build" not in str(reason)
    if reason is None:
        return DeviceChoice(asked, "cuda", (CUDA, CPU), gpu_build=True)
    if asked == "cuda":
        raise ConfigError(f"device cuda cannot be used: {reason}; run with device auto or cpu (SEMDUP_DEVICE)")
    return DeviceChoice(asked, "cpu", (CPU,), reason=str(reason), gpu_build=gpu_build)


def session_fallback(
    choice: DeviceChoice, session_providers: Sequence[str], detail: str | None = None
) -> DeviceChoice:
    """The choice as the built session holds it: CUDA asked but the session runs on CPU only (onnxruntime-gpu
    without the CUDA or cuDNN libraries it needs) falls back under ``auto`` and is refused under ``cuda``.
    ``detail``: onnxruntime's error, where building the CUDA session raised one.

    Raises:
        ConfigError: ``cuda`` asked and the session has no CUDA provider.
    """
    if choice.device != "cuda" or CUDA in session_providers:
        return choice
    said = f"onnxruntime said: {' '.join(detail.split())[:300]}" if detail else "onnxruntime's own log says which"
    reason = (
        "onnxruntime-gpu is installed and a GPU is visible, but its CUDA provider did not start: the CUDA or cuDNN "
        f"libraries it was built for are missing or do not match the driver; {said}"
    )
    if choice.asked == "cuda":
        raise ConfigError(f"device cuda cannot be used: {reason}; run with device auto or cpu (SEMDUP_DEVICE)")
    return DeviceChoice(choice.asked, "cpu", (CPU,), reason=reason, gpu_build=True)


def log_choice(choice: DeviceChoice, what: str) -> None:
    """The one log line of a fallback (nothing otherwise): a warning on the GPU build, info on the CPU build."""
    if not choice.fell_back:
        return
    if choice.gpu_build:
        logger.warning(
            "%s encodes on CPU, CUDA cannot be used: %s. Check the GPU and its libraries, or set SEMDUP_DEVICE=cpu "
            "to choose CPU explicitly",
            what,
            choice.reason,
        )
    else:
        logger.info("%s encodes on CPU: %s", what, choice.reason)
