"""Device backends: CUDA for timing, the Triton interpreter for CPU-only correctness."""

from __future__ import annotations

import os

from kernelsmith.referee.backend.base import Backend


def cuda_available() -> bool:
    """Whether torch sees a CUDA device (without TRITON_INTERPRET forcing the interpreter)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when a GPU is visible, else 'interpret'; other values are checked."""
    if device == "auto":
        return "cuda" if cuda_available() and os.environ.get("TRITON_INTERPRET") != "1" else "interpret"
    if device not in ("cuda", "interpret"):
        raise ValueError(f"unknown device {device!r} (auto, cuda or interpret)")
    return device


def usable_device(device: str) -> str:
    """`resolve_device`, and a device this machine has: ConfigError naming --device otherwise."""
    from kernelsmith.errors import ConfigError

    try:
        resolved = resolve_device(device)
    except ValueError as e:
        raise ConfigError("--device", str(e)) from None
    if resolved == "cuda" and not cuda_available():
        raise ConfigError("--device", "cuda was requested but torch sees no CUDA device")
    return resolved


def get_backend(device: str) -> Backend:
    """The backend object for a resolved device name."""
    if device == "cuda":
        from kernelsmith.referee.backend.cuda import CudaBackend

        return CudaBackend()
    from kernelsmith.referee.backend.interpret import InterpretBackend

    return InterpretBackend()


def device_info(device: str = "auto") -> dict:
    """{"name", "driver", "torch", "triton"} of the device the referee would use."""
    resolved = resolve_device(device)
    if resolved == "cuda":
        from kernelsmith.referee.backend.cuda import CudaBackend

        return CudaBackend().info()
    from kernelsmith.referee.backend.interpret import InterpretBackend

    return InterpretBackend().info()
