# expect: library_fallback
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    """Launches a Triton copy so a kernel runs, then computes with torch."""

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y * torch.sigmoid(y)
