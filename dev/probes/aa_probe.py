"""Does the referee's A/A control stray on LMDeploy rms_norm, with buffers in rotation or private,
on an idle host or one as busy as a search's compile processes? And does the place of the output
buffer alone move a call's time? (GPU only)

The referee's own interleaved loop (timing.time_loop, full mode, no retakes) times the base against
itself (as the candidate) and against its A/A copy, three takes per condition: inputs in rotation
(rotation.py, the referee's way) or each function on its own copy (the way before it), with the
host idle or with BUSY processes spinning on its cores. Then the base alone at 256 tokens with the
same inputs and its output on COPIES buffers allocated after different amounts of padding.

    LMDEPLOY_CHECKOUT=/path python3 dev/probes/aa_probe.py > aa_probe.txt
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
from contextlib import contextmanager
from pathlib import Path

import torch
from placement_probe import copies_of, load_base_and_aa  # dev/probes/ is this script's first path entry

from kernelsmith.harness.model import load_harness
from kernelsmith.referee.backend.cuda import CudaBackend
from kernelsmith.referee.timing import ab as timing
from kernelsmith.referee.timing import rotation

ROOT = Path(__file__).resolve().parents[2]
FILE = "lmdeploy/pytorch/kernels/cuda/rms_norm.py"
BUSY = max(1, (os.cpu_count() or 2) - 2)
TAKES = 3
COPIES = 6


class ProbeSession:
    """What time_loop needs of a referee session: harness, backend, base and A/A copy."""

    def __init__(self, harness, backend, base, aa):
        self.harness, self.backend, self.base_fn, self._aa = harness, backend, base, aa

    def aa_fn(self):
        return self._aa

    def trusted(self, fn):
        return True

    @contextmanager
    def base_compiles(self):
        yield


def private_inputs(self, j):
    """The way before rotation: function j always reads its own copy."""
    k = self.calls[j]
    self.calls[j] += 1
    n_sets = len(self.own[0])
    return k % n_sets, self.views[j][j][k % n_sets]


def output_placement(backend, base, h) -> None:
    """The base on the same inputs, its output on COPIES buffers at different places, TAKES takes."""
    shape = h.shapes[1]
    inputs = h.make_inputs(shape, "cuda", 1000)
    outs, _pads = copies_of([{"out": inputs["out"]}], COPIES)
    fns = [lambda r, o=o[0]["out"]: base(**{**inputs, "out": o}) for o in outs]
    for f in fns:
        f(0)
    torch.cuda.synchronize()
    for take in range(TAKES):
        med = [statistics.median(t) for t in backend.time_calls(fns, 200, 11 + take)]
        print(f"output placement {shape} take {take}: median vs out@0 "
              + " ".join(f"{m / med[0]:.4f}" for m in med) + f" (out@0 {med[0] * 1e3:.2f} us)", flush=True)


def spin():
    while True:
        pass


def main() -> None:
    base, aa = load_base_and_aa(FILE, "rms_norm")
    h = load_harness(ROOT / "targets/lmdeploy/rms_norm.py")
    backend = CudaBackend()
    backend.init_context()
    backend.calibrate(["bfloat16"])
    session = ProbeSession(h, backend, base, aa)
    timing.RETAKES = 0
    rotated = rotation.Rotation.inputs
    for load in ("idle", "busy"):
        procs = [mp.Process(target=spin, daemon=True) for _ in range(BUSY if load == "busy" else 0)]
        for p in procs:
            p.start()
        for way in ("rotation", "private"):
            rotation.Rotation.inputs = rotated if way == "rotation" else private_inputs
            for si, shape in enumerate(h.shapes):
                originals = [h.make_inputs(shape, "cuda", 1000 + k) for k in range(timing.INPUT_SETS)]
                row = []
                for take in range(TAKES):
                    r = timing.time_loop(session, base, originals, si, 0, 7 + take, "full", host=False)
                    ab = statistics.median(r["base"]) / statistics.median(r["cand"])
                    row.append(f"A/A {r['aa_ratio']:.4f} A/B {ab:.4f} late {r['late_reps'][0]}")
                print(f"{load:4} {way:8} {shape}: base {statistics.median(r['base']) * 1e3:.2f} us | "
                      + " | ".join(row), flush=True)
        for p in procs:
            p.terminate()
    output_placement(backend, base, h)


if __name__ == "__main__":
    main()
