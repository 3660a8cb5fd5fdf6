"""An autotuned kernel whose chosen config shows in its output, with a benchmark that makes a runner
choose another config than any other process: on a GPU, timing noise can make two processes that
tune the same kernel choose differently; here it is certain (the autotune sharing tests)."""

import torch
import triton
import triton.language as tl
from triton.runtime.autotuner import Autotuner

BENCHED: list[int] = []  # one entry per config this process benchmarked


def _bench(kernel_call, quantiles=None, **_):
    """Config 0 is fastest, except in a referee runner (its monitor hooks Autotuner.run), where
    config 1 is: configs are benchmarked in their order, two per key."""
    in_runner = bool(getattr(Autotuner.run, "__ks_hook__", False))
    index = len(BENCHED) % 2
    BENCHED.append(index)
    ms = 1.0 if index == int(in_runner) else 2.0
    return [ms] * len(quantiles) if quantiles else ms


@triton.autotune(configs=[triton.Config({"MARK": 0}), triton.Config({"MARK": 1})], key=["n"], do_bench=_bench)
@triton.jit
def _double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, MARK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2 + MARK, mask=mask)


def double(x: torch.Tensor) -> torch.Tensor:
    """2 x (plus the MARK of the config the autotuner chose: 0 for the right answer)."""
    out = torch.empty_like(x)
    n = x.numel()
    _double_kernel[(triton.cdiv(n, 64),)](x, out, n, BLOCK=64)
    return out
