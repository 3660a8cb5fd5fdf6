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
    compiles = False  # whether kernels compile to binaries (kept in Triton's on-disk cache)

    def info(self) -> dict:
        """{"name", "driver", "torch", "triton"} for the verdict and result.json."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait for all queued device work."""

    def init_context(self) -> None:
        """Create this process's device context (before any candidate code runs)."""

    def free_memory(self) -> int | None:
        """Bytes of device memory free now, across every process on the device (None: this backend
        has no device memory of its own to measure)."""
        return None

    def release(self) -> None:
        """Give the device memory this process caches but does not use back to the device."""

    def allocator_bytes(self) -> dict | None:
        """This process's allocator: bytes its tensors take and bytes it holds from the device
        (None: no device memory of its own)."""
        return None

    def time_calls(self, fns: list[Callable[[int], object]], reps: int, order_seed: int) -> list[list[float]]:
        """Device milliseconds per call of each fn(rep), interleaved rep by rep: [fn][rep]. A fn with
        a `prepare(rep)` attribute gets it called first, outside the timed window."""
        raise NotImplementedError(f"{self.name} backend cannot time kernels")

    def late_reps(self) -> tuple[int, int]:
        """(retimed, kept) repetitions so far whose call the host queued after the device reached
        its start event (event_timing.py); none where nothing is timed that way."""
        return 0, 0

    def late_since(self, before: tuple[int, int]) -> list[int]:
        """[retimed, kept] late repetitions since `before` (an earlier `late_reps()`)."""
        return [now - then for now, then in zip(self.late_reps(), before, strict=True)]

    def host_time(self, fn: Callable[[int], object], calls: int) -> float:
        """Host-inclusive milliseconds per call over `calls` back-to-back eager calls."""
        raise NotImplementedError(f"{self.name} backend cannot time kernels")

    def calibrate(self, dtype_names: list[str], given: dict | None = None) -> dict:
        """Measure what timing needs (peak rates for `dtype_names`, spin length) in this process.

        `given`: the same numbers measured by an earlier worker of this referee before any
        candidate ran in it (the parent hands them over); anything missing is measured here. The
        result is plain data for the parent. Never read from a file a candidate could write.
        """
        return {}

    def peak(self, dtype_name: str | None = None) -> dict:
        """The calibrated {"bandwidth_gbs", "tflops"} (for `dtype_name`)."""
        return {}
