"""A looped row reduction that recomputes loop invariants every iteration: the row's start address
and a scalar product in the column loop, and a weight load in a short unrolled loop with no store."""

import torch
import triton
import triton.language as tl


@triton.jit
def _row_dot_kernel(x_ptr, w_ptr, out_ptr, n_cols, stride, alpha, beta, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < n_cols
        # the row's start and the scale are the same on every iteration
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        acc += x * (alpha * beta)
    total = tl.sum(acc, axis=0)
    for i in tl.static_range(2):
        total += tl.load(w_ptr + row).to(tl.float32) * (i + 1)
    tl.store(out_ptr + row, total)


def row_dot(x: torch.Tensor, w: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    """float32 [rows]: alpha * beta * sum(x[row]) + 3 * w[row]."""
    rows, cols = x.shape
    out = torch.empty(rows, device=x.device, dtype=torch.float32)
    _row_dot_kernel[(rows,)](x, w, out, cols, x.stride(0), alpha, beta, BLOCK=16)
    return out
