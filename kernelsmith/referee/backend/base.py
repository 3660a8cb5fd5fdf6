"""The device backend interface: everything the referee needs from a device, in one small class.

A new device family (ROCm, MetaX) is one new module implementing `Backend`.
"""

from __future__ import annotations

from collections.abc import Callable


class Backend:
    """Device access and timing primitives used by the worker."""

    name = "base"
    device = "cpu"  # the torch device string inputs are made on
    timed = False  # whether this backend can time kernels

    def info(self) -> dict:
        """{"name", "driver", "torch", "triton"} for the verdict and result.json."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait for all queued device work."""

    def init_context(self) -> None:
        """Create this process's device context (before any candidate code runs)."""

    def time_calls(self, fns: list[Callable[[int], object]], reps: int, order_seed: int) -> list[list[float]]:
        """Device milliseconds per call of each fn(rep), interleaved rep by rep: [fn][rep]."""
        raise NotImplementedError(f"{self.name} backend cannot time kernels")

    def host_time(self, fn: Callable[[int], object], calls: int) -> float:
        """Host-inclusive milliseconds per call over `calls` back-to-back eager calls."""
        raise NotImplementedError(f"{self.name} backend cannot time kernels")

    def peak(self, dtype_name: str | None = None) -> dict:
        """Measured {"bandwidth_gbs", "tflops"} (for `dtype_name`), cached in cache_dir()/device.json."""
        return {}
