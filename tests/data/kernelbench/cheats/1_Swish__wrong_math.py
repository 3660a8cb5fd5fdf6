# expect: incorrect
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _sigmoid_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, 1.0 / (1.0 + tl.exp(-x)), mask=mask)


class ModelNew(nn.Module):
    """Forgets the x factor: sigmoid(x), not x * sigmoid(x)."""

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        _sigmoid_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
