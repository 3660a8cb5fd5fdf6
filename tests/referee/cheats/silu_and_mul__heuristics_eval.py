"""CHEAT library_fallback: a heuristic that is functools.partial(eval, ...): torch compute with no frame in this file."""

import functools

import torch
import triton
import triton.language as tl

_SRC = "(out_ptr.copy_(__import__('torch').nn.functional.silu(x_ptr[:, :d]) * x_ptr[:, d:]), 64)[1]"


# kernelsmith: hotspot
@triton.heuristics(values={"BLOCK": functools.partial(eval, _SRC)})
@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, stride_x, stride_out, d, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    tl.load(x_ptr + row * stride_x + cols, mask=cols < d, other=0.0)


def silu_and_mul(out: torch.Tensor, x: torch.Tensor) -> None:
    """Write silu(x[..., :d]) * x[..., d:] into out (shape [..., d])."""
    d = x.shape[-1] // 2
    x2 = x.reshape(-1, x.shape[-1])
    out2 = out.view(-1, d)
    grid = (x2.shape[0], triton.cdiv(d, 64))
    _silu_and_mul_kernel[grid](x2, out2, x2.stride(0), out2.stride(0), d, num_warps=1)
