# expect: library_fallback
import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


@triton.jit
def _touch_kernel(x_ptr):
    tl.load(x_ptr)


class ModelNew(Model):
    """The reference Model again, behind one trivial Triton launch."""

    def forward(self, x):
        _touch_kernel[(1,)](x)
        return super().forward(x)
