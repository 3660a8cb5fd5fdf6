"""Where late repetitions come from (GPU only): LMDeploy rms_norm's base timed with the CUDA backend's
loop, every call's host phases recorded (prepare, flush+spin, start, launcher, end) with its place in
the block, whether the device reached its start event first, and the time the events bracket.

    LMDEPLOY_CHECKOUT=/path python3 dev/probes/late_reps_probe.py [--gc-off] > late.txt
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from pathlib import Path

import torch

from kernelsmith.lightimport import install_light_package, install_stub
from kernelsmith.referee.backend import event_timing
from kernelsmith.referee.backend.cuda import CudaBackend

ROOT = Path(__file__).resolve().parents[2]
SHAPES = [(1, 4096), (256, 4096), (16384, 8192)]


def load_rms_norm():
    """The upstream launcher, imported without LMDeploy's package __init__ (as the referee does)."""
    install_stub("lmdeploy.utils", ROOT / "targets/lmdeploy/stubs/lmdeploy_utils.py")
    install_light_package("lmdeploy.pytorch.kernels.cuda", [os.environ["LMDEPLOY_CHECKOUT"]])
    from lmdeploy.pytorch.kernels.cuda.rms_norm import rms_norm
    return rms_norm


def recording_call(log: list, block_of: dict):
    """event_timing._timed_call, with host timestamps of each phase kept in `log`."""
    def timed_call(queue, fn, i, r, spin_us):
        t0 = time.perf_counter()
        start, end = queue.event(), queue.event()
        prepare = getattr(fn, "prepare", None)
        if prepare is not None:
            prepare(r)
        t1 = time.perf_counter()
        queue.gap(spin_us)
        t2 = time.perf_counter()
        start.record()
        t3 = time.perf_counter()
        fn(r)
        t4 = time.perf_counter()
        end.record()
        late = start.query()
        t5 = time.perf_counter()
        stamps = (t0, t1, t2, t3, t4, t5)
        pos = block_of.setdefault("pos", 0)
        block_of["pos"] = pos + 1
        log.append({"fn": i, "pos": pos, "spin": spin_us, "late": late, "start": start, "end": end,
                    "us": [(stamps[j + 1] - stamps[j]) * 1e6 for j in range(5)]})
        return i, start, end, late
    return timed_call


def launcher(rms_norm, x, w, out):
    """One timed fn: the upstream call into `out`, restored from x before each call (untimed)."""
    def fn(r):
        rms_norm(x, w, 1e-6, out=out)
    fn.prepare = lambda r: out.copy_(x)
    return fn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gc-off", action="store_true")
    args = ap.parse_args()
    rms_norm = load_rms_norm()
    backend = CudaBackend()
    backend.init_context()
    backend.calibrate(["bfloat16"])
    if args.gc_off:
        gc.disable()
    block_of: dict = {}
    sync = backend.synchronize

    def synchronize():  # a block ends: positions count from 0 again
        sync()
        block_of["pos"] = 0
    for t, h in SHAPES:
        x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(h, device="cuda", dtype=torch.bfloat16)
        outs = [torch.empty_like(x) for _ in range(3)]

        fns = [launcher(rms_norm, x, w, o) for o in outs]
        for f in fns:
            f(0)
        torch.cuda.synchronize()
        log: list = []
        event_timing._timed_call = recording_call(log, block_of)
        backend.synchronize = synchronize
        for k in range(8):
            synchronize()
            backend.time_calls(fns[:2], 3, k)
            backend.time_calls(fns, 25, 100 + k)
        torch.cuda.synchronize()
        report(f"{t}x{h}", log)


def report(name: str, log: list) -> None:
    """Late rate by place in the block; host phases and bracketed times of late and clean calls."""
    for e in log:
        e["ms"] = e["start"].elapsed_time(e["end"])
    late = [e for e in log if e["late"]]
    clean = [e for e in log if not e["late"]]
    print(f"== {name}: {len(log)} calls, {len(late)} late")
    by_pos: dict = {}
    for e in log:
        n, k = by_pos.get(e["pos"], (0, 0))
        by_pos[e["pos"]] = (n + 1, k + e["late"])
    print("late by place in block:", {p: f"{k}/{n}" for p, (n, k) in sorted(by_pos.items()) if k})
    for what, group in (("late", late), ("clean", clean)):
        if not group:
            continue
        phases = [statistics.median(e["us"][j] for e in group) for j in range(5)]
        worst = max(group, key=lambda e: sum(e["us"]))
        print(f"{what}: median ms {statistics.median(e['ms'] for e in group):.4f}, max "
              f"{max(e['ms'] for e in group):.4f}; host us median prepare/gap/start/launch/end "
              + "/".join(f"{p:.1f}" for p in phases)
              + f"; slowest call {sum(worst['us']):.0f} us ({'/'.join(f'{p:.0f}' for p in worst['us'])})")
    for e in late[:12]:
        print(f"  late: pos {e['pos']} fn {e['fn']} spin {e['spin']:.0f} ms {e['ms']:.4f} host us "
              + "/".join(f"{p:.0f}" for p in e["us"]))


if __name__ == "__main__":
    main()
