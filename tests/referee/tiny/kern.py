"""Tiny Triton kernels written the way upstream engines write them (the harness fairness tests)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, (x * 1.5 + 0.25).to(out_ptr.dtype.element_ty), mask=mask)


def scale(x: torch.Tensor) -> torch.Tensor:
    """x * 1.5 + 0.25 in x's dtype (computed in float32)."""
    out = torch.empty_like(x)
    n = x.numel()
    _scale_kernel[(triton.cdiv(n, 64),)](x, out, n, BLOCK=64)
    return out


@triton.jit
def _fill_slots_kernel(cache_ptr, src_ptr, slots_ptr, d, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    slot = tl.load(slots_ptr + row)
    cols = tl.arange(0, BLOCK)
    mask = cols < d
    tl.store(cache_ptr + slot * d + cols, tl.load(src_ptr + row * d + cols, mask=mask), mask=mask)


def fill_slots(cache: torch.Tensor, src: torch.Tensor, slots: torch.Tensor) -> None:
    """cache[slots[i]] = src[i]: a paged cache filled at some slots (the rest is left alone)."""
    rows, d = src.shape
    _fill_slots_kernel[(rows,)](cache, src, slots, d, BLOCK=triton.next_power_of_2(d))
