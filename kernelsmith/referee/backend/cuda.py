"""NVIDIA CUDA backend: CUDA events, an L2 flush and a GPU spin before every timed call."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import torch

from kernelsmith.referee.backend.base import Backend
from kernelsmith.referee.backend.event_timing import SPIN_US, LateReps, time_reps

L2_FLUSH_BYTES = 256 << 20  # larger than any current L2 (H200: 60 MiB)


def driver_version() -> str | None:
    """The NVIDIA kernel driver version, read without creating a CUDA context."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    for word in text.split():
        parts = word.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts):
            return word
    return None


class CudaBackend(Backend):
    """One CUDA device (the worker sees only the GPU in CUDA_VISIBLE_DEVICES)."""

    name = "cuda"
    device = "cuda"
    timed = True
    compiles = True

    def __init__(self):
        self._flush = None
        self.calibration: dict = {}
        self._spin_us = SPIN_US  # grows while the host queues calls late, and relaxes after
        self.late = LateReps()

    def init_context(self) -> None:
        """Create the CUDA context and the L2 flush buffer."""
        torch.cuda.init()
        torch.cuda.set_device(0)
        self._flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()

    def info(self) -> dict:
        """GPU name, driver version, torch and triton versions."""
        import triton

        return {"name": torch.cuda.get_device_name(0), "driver": driver_version(),
                "torch": torch.__version__, "triton": triton.__version__,
                "cuda": torch.version.cuda}

    def synchronize(self) -> None:
        """torch.cuda.synchronize()."""
        torch.cuda.synchronize()

    def free_memory(self) -> int:
        """torch.cuda.mem_get_info's free bytes: what no process on the device holds."""
        return int(torch.cuda.mem_get_info()[0])

    def release(self) -> None:
        """Blocks this process's allocator keeps but does not use, and those it shared with another
        process that has let them go (a shared region replaced by a larger one), back to the device."""
        torch.cuda.ipc_collect()
        torch.cuda.empty_cache()

    def allocator_bytes(self) -> dict:
        """torch's caching allocator in this process, every pool: `allocated` (live tensors) and
        `reserved` (held from the device; the difference is cached or fragmented)."""
        return {"allocated": int(torch.cuda.memory_allocated()),
                "reserved": int(torch.cuda.memory_reserved())}

    # -- device measurements ------------------------------------------------------------------
    # Taken in the worker before any candidate code runs (or handed over by the parent from an
    # earlier worker's start): a file such as cache_dir()/device.json can be rewritten by any
    # candidate, and these numbers set the roofline floor of every speedup and the spin length.
    def calibrate(self, dtype_names: list[str], given: dict | None = None) -> dict:
        """Copy bandwidth, matmul rate per dtype and the spin rate, measured here unless `given`."""
        cal = {k: v for k, v in (given or {}).items() if k in ("bandwidth_gbs", "sleep_cycles_per_us")
               and _positive(v)}
        tflops = {k: v for k, v in ((given or {}).get("tflops") or {}).items() if v is None or _positive(v)}
        if "sleep_cycles_per_us" not in cal:
            cal["sleep_cycles_per_us"] = self._measure_spin()
        if "bandwidth_gbs" not in cal:
            cal["bandwidth_gbs"] = self._measure_bandwidth()
        for name in dtype_names:
            if name not in tflops:
                tflops[name] = self._measure_matmul(name)
        cal["tflops"] = tflops
        self.calibration = cal
        return cal

    def cycles_per_us(self) -> float:
        """Clock cycles of torch.cuda._sleep per microsecond (from the calibration)."""
        if "sleep_cycles_per_us" not in self.calibration:
            self.calibrate([])
        return float(self.calibration["sleep_cycles_per_us"])

    def peak(self, dtype_name: str | None = None) -> dict:
        """Calibrated copy bandwidth (GB/s) and matmul rate (TFLOP/s) for `dtype_name`."""
        if "bandwidth_gbs" not in self.calibration:
            self.calibrate([])
        tflops = self.calibration.get("tflops") or {}
        # A dtype not calibrated at worker start gets no flops roofline rather than a number
        # measured after candidate code ran here.
        return {"bandwidth_gbs": self.calibration["bandwidth_gbs"],
                "tflops": tflops.get(dtype_name) if dtype_name else None}

    def _measure_spin(self) -> float:
        torch.cuda._sleep(100_000)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 2_000_000
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        return cycles / (start.elapsed_time(end) * 1000.0)

    def _best_ms(self, fn: Callable[[], object], reps: int = 10) -> float:
        fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            best = min(best, start.elapsed_time(end))
        return best

    def _measure_bandwidth(self) -> float:
        # 1 GiB each way (far beyond any L2), less on a device with little memory free: the worker
        # must start there, and the referee then says which shape does not fit (memory.py).
        n, free = 1 << 30, self.free_memory()
        while n > 64 << 20 and 4 * n > free:
            n //= 2
        src = torch.empty(n, dtype=torch.uint8, device="cuda").fill_(1)
        dst = torch.empty_like(src)
        ms = self._best_ms(lambda: dst.copy_(src))
        return 2 * n / (ms * 1e-3) / 1e9

    def _measure_matmul(self, dtype_name: str) -> float | None:
        dtype = getattr(torch, dtype_name, None)
        if dtype is None or not dtype.is_floating_point or dtype.itemsize == 1:
            return None
        n = 8192
        a = torch.randn(n, n, device="cuda").to(dtype)
        b = torch.randn(n, n, device="cuda").to(dtype)
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 roofline is true fp32
        try:
            ms = self._best_ms(lambda: a @ b, reps=5)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
        return 2 * n**3 / (ms * 1e-3) / 1e12

    # -- timing -------------------------------------------------------------------------------
    def time_calls(self, fns: list[Callable[[int], object]], reps: int, order_seed: int) -> list[list[float]]:
        """Interleaved device times: per rep every fn once, in a shuffled order, each after its
        `prepare(rep)` (if it has one), an L2 flush and a GPU spin, bracketed by CUDA events; a rep
        the host queued too late to be timed alone is timed again (event_timing.py)."""
        times, self._spin_us = time_reps(self, fns, reps, order_seed, self._spin_us, self.late)
        return times

    def late_reps(self) -> tuple[int, int]:
        """(retimed, kept) repetitions whose call was queued after the device reached its start."""
        return self.late.snapshot()

    # -- event_timing.EventQueue --------------------------------------------------------------
    def event(self) -> torch.cuda.Event:
        """A CUDA timing event."""
        return torch.cuda.Event(enable_timing=True)

    def gap(self, spin_us: float) -> None:
        """The L2 flush and a spin of `spin_us` microseconds, queued."""
        self._flush.zero_()
        torch.cuda._sleep(int(spin_us * self.cycles_per_us()))

    def host_time(self, fn: Callable[[int], object], calls: int) -> float:
        """Wall-clock ms per call for `calls` eager calls in a row (launch overhead included)."""
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(calls):
            fn(i)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3 / calls


def _positive(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
