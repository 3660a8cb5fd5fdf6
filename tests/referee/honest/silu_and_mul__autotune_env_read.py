"""HONEST: BLOCK autotuned over two configs with a wall-clock do_bench (Triton's own needs a GPU driver),
and a launch setting read (never written) from the environment and triton.knobs."""

import os
import statistics
import time

import torch
import triton
import triton.language as tl

# Reads of process settings change nothing for later code: they must not be flagged.
_INTERPRET = bool(triton.knobs.runtime.interpret) or os.environ.get("TRITON_INTERPRET") == "1"
_NUM_WARPS = int(os.environ.get("MINISERVE_SILU_WARPS", "1" if _INTERPRET else "4"))


def _wall_clock_bench(kernel_call, quantiles=None):
    """Median of a few wall-clock runs, in ms (the order statistics Triton asks for, all the same)."""
    times = []
    for _ in range(3):
        start = time.perf_counter()
        kernel_call()
        times.append((time.perf_counter() - start) * 1e3)
    median = statistics.median(times)
    return [median] * len(quantiles) if quantiles else median


# kernelsmith: hotspot
@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=_NUM_WARPS),
                          triton.Config({"BLOCK": 128}, num_warps=_NUM_WARPS)],
                 key=["d"], do_bench=_wall_clock_bench)
@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, stride_x, stride_out, d, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    col_block = tl.program_id(1)
    cols = col_block * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + d + cols, mask=mask, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(out: torch.Tensor, x: torch.Tensor) -> None:
    """Write silu(x[..., :d]) * x[..., d:] into out (shape [..., d])."""
    d = x.shape[-1] // 2
    x2 = x.reshape(-1, x.shape[-1])
    out2 = out.view(-1, d)
    grid = lambda meta: (x2.shape[0], triton.cdiv(d, meta["BLOCK"]))  # noqa: E731
    _silu_and_mul_kernel[grid](x2, out2, x2.stride(0), out2.stride(0), d)
