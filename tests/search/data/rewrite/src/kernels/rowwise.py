"""Row-wise reduction: each row scaled by its reciprocal root mean square, one row per program."""

import torch
import triton
import triton.language as tl


@triton.jit
def _row_rms_kernel(x_ptr, out_ptr, rms_ptr, n_cols, stride, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    rms = tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(rms_ptr + row, rms)
    tl.store(out_ptr + row * stride + cols, (x / rms).to(out_ptr.dtype.element_ty), mask=mask)


def row_rms(x: torch.Tensor, eps: float = 1e-6):
    """(x / rms(x) per row, rms per row in float32) for a contiguous 2-D x."""
    rows, cols = x.shape
    out = torch.empty_like(x)
    rms = torch.empty(rows, device=x.device, dtype=torch.float32)
    grid = (rows,)
    _row_rms_kernel[grid](x, out, rms, cols, x.stride(0), eps, BLOCK_N=triton.next_power_of_2(cols))
    return out, rms
