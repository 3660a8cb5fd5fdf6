"""BROKEN crash: dereferences a null pointer in-process."""

import ctypes

import torch
import triton
import triton.language as tl


# kernelsmith: hotspot
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
    ctypes.string_at(0)
