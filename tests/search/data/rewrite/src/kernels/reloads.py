"""Repeated loads: the weight row loaded twice with nothing in between (merged), and the input row
loaded again after a store that may alias it (kept)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _scale_twice_kernel(x_ptr, w_ptr, out_ptr, out2_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    w = tl.load(w_ptr + cols, mask=mask)
    x = tl.load(x_ptr + row * n + cols, mask=mask).to(tl.float32)
    y = x * tl.load(w_ptr + cols, mask=mask)
    tl.store(out_ptr + row * n + cols, y, mask=mask)
    z = tl.load(x_ptr + row * n + cols, mask=mask) + 1
    tl.store(out2_ptr + row * n + cols, z + w, mask=mask)


def scale_twice(x: torch.Tensor, w: torch.Tensor):
    """(x * w, x + 1 + w) per row for a contiguous 2-D x and a weight row w."""
    out = torch.empty_like(x)
    out2 = torch.empty_like(x)
    block = triton.next_power_of_2(x.shape[1])
    _scale_twice_kernel[(x.shape[0],)](x, w, out, out2, x.shape[1], BLOCK=block)
    return out, out2
