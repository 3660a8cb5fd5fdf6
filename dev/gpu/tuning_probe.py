"""Where an autotuned base's first calls spend their time on the GPU, with and without the oracle's
parallel compile (kernelsmith/referee/proc/parallel_tune.py). Loads the operator as the oracle does
(tag "base"), calls it on each listed shape twice (the first call tunes), and prints per call the
seconds and, per autotuned kernel, Triton's own benchmark time and its key count.
  PYTHONPATH=$PWD python3 dev/gpu/tuning_probe.py targets/liger.yaml fused_moe CHECKOUT THREADS [SHAPES]
THREADS 0: Triton as it is (one config compiled after another)."""

import sys
import time
from pathlib import Path

import torch

from kernelsmith.harness.model import load_harness
from kernelsmith.loader import load_operator_module
from kernelsmith.onboard.config import load_target
from kernelsmith.referee.proc import parallel_tune
from kernelsmith.referee.proc.autotune_share import Tuning

yaml, op_name, checkout, threads = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
limit = int(sys.argv[5]) if len(sys.argv) > 5 else 99
target = load_target(yaml)
op = next(o for o in target.operators if o.name == op_name)
on = parallel_tune.install(threads) if threads else False
device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
print(f"parallel compile: {on} ({threads} threads); {device}", flush=True)
tuning = Tuning()
harness = load_harness(op.harness, op.variant)
stubs = {k: Path(v) for k, v in (target.stubs or {}).items()}
mod = load_operator_module(checkout, op.file, tag="base", stubs=stubs)
fn = harness.callable_of(mod, op.entry)
for i, shape in enumerate(harness.shapes_for("cuda")[:limit]):
    inputs = harness.make_inputs(shape, "cuda", 0)
    for call in (1, 2):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn(**inputs)
        torch.cuda.synchronize()
        took = time.perf_counter() - t
        tuned = {name.rsplit(".", 1)[-1]: (round(getattr(tu, "bench_time", 0.0), 1), len(tu.cache))
                 for name, _, tu in tuning.kernels()}
        print(f"shape {i} {shape} call {call}: {took:.1f} s; compiled on threads {parallel_tune.COMPILED[0]};"
              f" bench_time s, keys: {tuned}", flush=True)
