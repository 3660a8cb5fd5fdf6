"""Why a synchronising launcher's base times differ between the runner and the judge (GPU only).

Liger's cross_entropy_forward calls `.item()` between its kernels, so every timed call waits for the
device and the time its events bracket includes the host's work after the wait. On the H100 the
runner reported its base at 0.60 ms (samples 0.45-1.15) where the judge's oracle measured 0.39 and
0.46 ms: `forged_timing` on the base itself. This times the same call with the CUDA backend's loop
in several settings, one process, to see which one moves the median:
  judge-like (one fn, 20 repetitions), runner-like (three fns interleaved, 200 repetitions), the
  integrity monitor installed (its Triton launch hooks and audit hook), the op recorder active,
  and (BUSY=1) a busy Python thread beside the loop. SPIN_ONLY=1: the call at fixed spins (100, 400,
  1600 us); ISOLATE=1: the runner's loop taken apart (repetitions, fns, input sets, queued blocks).

    LIGER_CHECKOUT=/path python3 dev/probes/sync_call_probe.py > sync.txt
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

from kernelsmith.referee.backend.cuda import CudaBackend

ROOT = Path(__file__).resolve().parents[2]


def load_harness():
    """targets/liger/cross_entropy.py as a module."""
    spec = importlib.util.spec_from_file_location("ce_harness", ROOT / "targets/liger/cross_entropy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_fns(harness, entry, shape, n: int) -> list:
    """n timed fns, each on its own input set, restoring the in-place logits before each call."""
    fns = []
    for k in range(n):
        orig = harness.make_inputs(shape, "cuda", 1000 + k)
        work = dict(orig, _input=orig["_input"].clone())

        def run(r, work=work):
            harness.call(entry, work)

        def prepare(r, work=work, orig=orig):
            work["_input"].copy_(orig["_input"])
        run.prepare = prepare
        fns.append(run)
    return fns


def stats(times) -> str:
    """Median, 10th and 90th percentile, min and max of one fn's ms."""
    a = np.asarray(times)
    return (f"median {np.median(a):.4f} p10 {np.percentile(a, 10):.4f} p90 {np.percentile(a, 90):.4f} "
            f"min {a.min():.4f} max {a.max():.4f} n {len(a)}")


def measure(backend, label: str, fns, reps: int) -> None:
    """One time_calls over `fns`; one line per fn."""
    before = backend.late_reps()
    t0 = time.perf_counter()
    times = backend.time_calls(fns, reps, 7)
    wall = time.perf_counter() - t0
    late = [b - a for a, b in zip(before, backend.late_reps(), strict=True)]
    for i, t in enumerate(times):
        print(f"{label} fn{i}: {stats(t)} | late retimed/kept {late} | {wall:.2f} s", flush=True)


def fixed_spin(backend, fn, spin_us: float, reps: int) -> list[float]:
    """ms per call with the spin held at `spin_us` (no re-timing): prepare, flush and spin, call."""
    out = []
    for r in range(reps):
        start, end = backend.event(), backend.event()
        fn.prepare(r)
        backend.gap(spin_us)
        start.record()
        fn(r)
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end))
    return out


def spin_sweep(backend, harness, entry) -> None:
    """The same call at spins of 100, 400 and 1600 us in alternating rounds, before and after three
    seconds of heavy work: whether the wait's length moves the time of a synchronising call."""
    shape = harness.SHAPES[0]
    fn = make_fns(harness, entry, shape, 1)[0]
    spins = (100.0, 400.0, 1600.0)
    for phase in ("cold", "after 3 s of calls"):
        if phase != "cold":
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < 3:
                fixed_spin(backend, fn, 100.0, 20)
        got = {s: [] for s in spins}
        for _ in range(5):
            for s in spins:
                got[s] += fixed_spin(backend, fn, s, 20)
        for s in spins:
            print(f"fixed spin {s:.0f} us, {phase}: {stats(got[s])}", flush=True)


def isolate(backend, harness, entry) -> None:
    """Which part of the runner's loop moves the time: many repetitions, three fns, three input
    sets, or queueing a block of calls between synchronisations."""
    shape = harness.SHAPES[0]
    one = make_fns(harness, entry, shape, 1)
    three = make_fns(harness, entry, shape, 3)
    shared = [one[0]] * 3
    for label, fns, reps in (("loop, 1 fn, 20 reps", one, 20), ("loop, 1 fn, 200 reps", one, 200),
                             ("loop, 3 fns on one set, 200 reps", shared, 200),
                             ("loop, 3 fns on 3 sets, 200 reps", three, 200),
                             ("loop, 1 fn, 20 reps again", one, 20)):
        backend._spin_us = 100.0
        measure(backend, label, fns, reps)
    got = [[] for _ in three]
    for _ in range(200):
        for i, fn in enumerate(three):
            got[i] += fixed_spin(backend, fn, 100.0, 1)
    for i, t in enumerate(got):
        print(f"synchronised each call, 3 fns on 3 sets, fn{i}: {stats(t)}", flush=True)


def main() -> None:
    """Each setting in turn on the 4096 x 32000 bf16 shape, then the 8192 x 128256 one."""
    sys.path.insert(0, os.path.join(os.environ["LIGER_CHECKOUT"], "src"))
    from liger_kernel.ops.cross_entropy import cross_entropy_forward

    harness = load_harness()
    backend = CudaBackend()
    backend.init_context()
    backend.calibrate(["bfloat16"])
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    print("cpu affinity", sorted(os.sched_getaffinity(0)), "| cores", os.cpu_count(), flush=True)
    if os.environ.get("ISOLATE"):
        isolate(backend, harness, cross_entropy_forward)
        return
    if os.environ.get("SPIN_ONLY"):
        spin_sweep(backend, harness, cross_entropy_forward)
        return
    for shape in harness.SHAPES[:2]:
        print("shape", shape, flush=True)
        one = make_fns(harness, cross_entropy_forward, shape, 1)
        three = make_fns(harness, cross_entropy_forward, shape, 3)
        for fn in three:
            fn(0)
        torch.cuda.synchronize()
        print(f"host ms per call {backend.host_time(one[0], 5):.4f}", flush=True)
        for rep in range(3):
            measure(backend, f"judge-like #{rep}", one, 20)
        measure(backend, "runner-like", three, 200)
        measure(backend, "judge-like after", one, 20)

        if not os.environ.get("BUSY"):  # a busy thread makes each call ~200 ms: opt-in
            continue
        stop = threading.Event()

        def busy(stop=stop):
            x = 0
            while not stop.is_set():
                x += 1
        t = threading.Thread(target=busy, daemon=True)
        t.start()
        measure(backend, "busy thread, judge-like", one, 20)
        measure(backend, "busy thread, runner-like", three, 200)
        stop.set()
        t.join()

    from kernelsmith.referee.checks.integrity import Monitor
    monitor = Monitor("cuda", [os.environ["LIGER_CHECKOUT"], str(ROOT)])
    monitor.install()
    for shape in harness.SHAPES[:1]:
        print("monitor installed; shape", shape, flush=True)
        one = make_fns(harness, cross_entropy_forward, shape, 1)
        three = make_fns(harness, cross_entropy_forward, shape, 3)
        measure(backend, "monitor, judge-like", one, 20)
        measure(backend, "monitor, runner-like", three, 200)
        with monitor.watch():
            measure(backend, "monitor watching ops, judge-like", one, 20)


if __name__ == "__main__":
    main()
