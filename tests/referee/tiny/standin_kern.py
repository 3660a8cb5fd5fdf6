"""A kernel module written as upstream engines write them: it asks Triton's active driver for the
backend at import, reads device properties per call, aliases a `tl` function at module level,
launches with a list grid and writes fp8 (the interpreter stand-in tests)."""

import torch
import triton
import triton.language as tl

IS_CUDA = triton.runtime.driver.active.get_current_target().backend == "cuda"
fast_exp = tl.math.exp


@triton.jit
def _exp_to_fp8_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, fast_exp(x).to(tl.float8e4nv), mask=mask)


def exp_to_fp8(x: torch.Tensor) -> torch.Tensor:
    """exp(x) stored as float8_e4m3fn."""
    assert IS_CUDA
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    out = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    block = 64 if sms > 100 else 32
    grid = [triton.cdiv(x.numel(), block)]
    _exp_to_fp8_kernel[grid](x, out, x.numel(), BLOCK=block)
    return out
