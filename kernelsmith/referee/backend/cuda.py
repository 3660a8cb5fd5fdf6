"""NVIDIA CUDA backend: CUDA events, an L2 flush and a GPU spin before every timed call."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch

from .base import Backend

SPIN_US = 100.0  # keeps the GPU queue busy so host launch cost never leaks into a timed region
L2_FLUSH_BYTES = 256 << 20  # larger than any current L2 (H200: 60 MiB)
BLOCK = 25  # reps queued between synchronisations


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

    def __init__(self, cache_dir: Path | None = None):
        self.cache_path = Path(cache_dir) / "device.json" if cache_dir else None
        self._flush = None
        self._cycles_per_us: float | None = None

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

    # -- cached device measurements -----------------------------------------------------------
    def _cache(self) -> dict:
        if self.cache_path is None or not self.cache_path.exists():
            return {}
        try:
            return json.loads(self.cache_path.read_text()).get(torch.cuda.get_device_name(0), {})
        except (OSError, ValueError):
            return {}

    def _store(self, entry: dict) -> None:
        if self.cache_path is None:
            return
        try:
            data = json.loads(self.cache_path.read_text()) if self.cache_path.exists() else {}
        except (OSError, ValueError):
            data = {}
        data[torch.cuda.get_device_name(0)] = entry
        tmp = self.cache_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(self.cache_path)

    def cycles_per_us(self) -> float:
        """Clock cycles of torch.cuda._sleep per microsecond (measured once, cached)."""
        if self._cycles_per_us is None:
            cached = self._cache().get("sleep_cycles_per_us")
            if cached:
                self._cycles_per_us = float(cached)
            else:
                torch.cuda._sleep(100_000)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                cycles = 2_000_000
                start.record()
                torch.cuda._sleep(cycles)
                end.record()
                torch.cuda.synchronize()
                self._cycles_per_us = cycles / (start.elapsed_time(end) * 1000.0)
                self._store({**self._cache(), "sleep_cycles_per_us": self._cycles_per_us})
        return self._cycles_per_us

    def peak(self, dtype_name: str | None = None) -> dict:
        """Measured copy bandwidth (GB/s) and matmul rate (TFLOP/s) for `dtype_name`, cached."""
        entry = self._cache()
        changed = False
        if "bandwidth_gbs" not in entry:
            entry["bandwidth_gbs"] = self._measure_bandwidth()
            changed = True
        tflops = entry.setdefault("tflops", {})
        if dtype_name and dtype_name not in tflops:
            tflops[dtype_name] = self._measure_matmul(dtype_name)
            changed = True
        if changed:
            self._store(entry)
        return {"bandwidth_gbs": entry["bandwidth_gbs"],
                "tflops": tflops.get(dtype_name) if dtype_name else None}

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
        n = 1 << 30
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
        """Interleaved device times: per rep every fn once, in a shuffled order, each after an L2
        flush and a ~100 µs spin, bracketed by CUDA events."""
        spin = int(SPIN_US * self.cycles_per_us())
        rng = random.Random(order_seed)
        times: list[list[float]] = [[] for _ in fns]
        done = 0
        while done < reps:
            n = min(BLOCK, reps - done)
            events = []
            for r in range(done, done + n):
                order = list(range(len(fns)))
                rng.shuffle(order)
                for i in order:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    self._flush.zero_()
                    torch.cuda._sleep(spin)
                    start.record()
                    fns[i](r)
                    end.record()
                    events.append((i, start, end))
            torch.cuda.synchronize()
            for i, start, end in events:
                times[i].append(start.elapsed_time(end))
            done += n
        return times

    def host_time(self, fn: Callable[[int], object], calls: int) -> float:
        """Wall-clock ms per call for `calls` eager calls in a row (launch overhead included)."""
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(calls):
            fn(i)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3 / calls
