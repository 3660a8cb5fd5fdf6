"""Times miniserve's kernels on the current device (CUDA events when available)."""

import os
import sys
import time

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from miniserve.kernels.rms_norm import rms_norm  # noqa: E402
from miniserve.kernels.silu_and_mul import silu_and_mul  # noqa: E402


def _time(fn, reps):
    if torch.cuda.is_available():
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / reps
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) * 1e3 / reps


def main():
    cuda = torch.cuda.is_available()
    dev, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float16)
    tokens, hidden = (4096, 4096) if cuda else (4, 128)
    reps = 100 if cuda else 2
    x = torch.randn(tokens, hidden, device=dev, dtype=dtype)
    w = torch.randn(hidden, device=dev, dtype=dtype)
    gu = torch.randn(tokens, 2 * hidden, device=dev, dtype=dtype)
    out = torch.empty(tokens, hidden, device=dev, dtype=dtype)
    print(f"rms_norm {tokens}x{hidden}: {_time(lambda: rms_norm(x, w), reps):.4f} ms")
    print(f"silu_and_mul {tokens}x{hidden}: {_time(lambda: silu_and_mul(out, gu), reps):.4f} ms")


if __name__ == "__main__":
    main()
