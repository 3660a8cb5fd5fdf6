"""Does an identical call run at a different speed on another copy of its inputs? (GPU only)

LMDeploy's multinomial_sampling, timed with the CUDA backend's loop as the referee times it: the
base on several private copies of the same three input sets (each copy allocated after a different
amount of padding, so it lands elsewhere in memory), and a second module loaded from the same file
(the referee's A/A copy) on two of those copies. Three takes with the same buffers: a difference
that holds across takes belongs to the buffers (or the module), not to sampling noise.

    LMDEPLOY_CHECKOUT=/path python3 dev/probes/placement_probe.py > placement.txt
"""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path

import torch

from kernelsmith.harness.model import load_harness
from kernelsmith.loader import load_operator_module
from kernelsmith.referee.backend.cuda import CudaBackend

ROOT = Path(__file__).resolve().parents[2]
FILE = "lmdeploy/pytorch/kernels/cuda/multinomial_sampling.py"
STUBS = {"lmdeploy.utils": ROOT / "targets/lmdeploy/stubs/lmdeploy_utils.py"}
COPIES = 6
TAKES = 3
REPS = 150


def load_base_and_aa(file: str, entry: str):
    """The base launcher of LMDeploy's `file` and its A/A copy, loaded as the referee's runner loads them."""
    root = Path(os.environ["LMDEPLOY_CHECKOUT"])
    base = load_operator_module(root, file, tag="base", stubs=STUBS)
    copy = Path(tempfile.mkdtemp(prefix="aa-")) / Path(file).name  # the runner's workdir/aa/<file>
    aa = load_operator_module(root, file, code=(root / file).read_text(), tag="aa", source_path=copy,
                              stubs=STUBS)
    return getattr(base, entry), getattr(aa, entry)


def copies_of(originals: list[dict], n: int) -> tuple[list[list[dict]], list]:
    """`n` private copies of the input sets, copy k allocated after k MiB + k*4 KiB of padding."""
    keep, out = [], []
    for k in range(n):
        keep.append(torch.empty((k << 20) + k * 4096, dtype=torch.uint8, device="cuda"))
        out.append([{key: (v.clone() if isinstance(v, torch.Tensor) else v) for key, v in s.items()}
                    for s in originals])
    return out, keep


def caller(fn, sets):
    """One timed fn: `fn` on input set r % 3 of its own copy."""
    return lambda r: fn(**sets[r % len(sets)])


def main() -> None:
    base, aa = load_base_and_aa(FILE, "multinomial_sampling")
    h = load_harness(ROOT / "targets/lmdeploy/multinomial_sampling.py")
    backend = CudaBackend()
    backend.init_context()
    backend.calibrate(["float32"])
    for si in (0, 4, 1):
        shape = h.shapes[si]
        originals = [h.make_inputs(shape, "cuda", 1000 + k) for k in range(3)]
        sets, pad = copies_of(originals, COPIES)
        fns = [caller(base, s) for s in sets] + [caller(aa, sets[0]), caller(aa, sets[1])]
        names = [f"base@{k}" for k in range(COPIES)] + ["aa@0", "aa@1"]
        for f in fns:
            for r in range(3):
                f(r)
        torch.cuda.synchronize()
        print(f"== shape {si} {shape}")
        print("scores addr mod 2MiB (KiB):",
              [round(s[0]["scores"].data_ptr() % (2 << 20) / 1024, 1) for s in sets])
        for take in range(TAKES):
            times = backend.time_calls(fns, REPS, 7 + take)
            med = [statistics.median(t) for t in times]
            print(f"take {take}: median ms vs base@0: "
                  + " ".join(f"{n}={m / med[0]:.4f}" for n, m in zip(names, med, strict=True))
                  + f" (base@0 {med[0]:.4f} ms)")
            per_set = [[statistics.median(t[j::3]) for j in range(3)] for t in times]
            print("   every third timed rep (one input set each), vs base@0: "
                  + " ".join(n + "=" + "/".join(f"{a / b:.4f}" for a, b in zip(p, per_set[0], strict=True))
                             for n, p in zip(names, per_set, strict=True)))
        del pad


if __name__ == "__main__":
    main()
