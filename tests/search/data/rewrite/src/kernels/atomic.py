"""A histogram with atomics: programs add into shared bins (the rewrites must decline it)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _histogram_kernel(x_ptr, bins_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    b = tl.load(x_ptr + offs, mask=mask, other=0)
    tl.atomic_add(bins_ptr + b, 1, mask=mask)


def histogram(x: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Counts of each value of x (int32 in [0, n_bins))."""
    bins = torch.zeros(n_bins, dtype=torch.int32, device=x.device)
    BLOCK = 32
    _histogram_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, bins, x.numel(), BLOCK=BLOCK)
    return bins
