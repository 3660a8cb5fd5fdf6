"""Harness for Unsloth's geglu_approx_backward_kernel(DW, e, g): the MLP backward of
h = gelu_tanh(e) * g (the tanh approximation) over [tokens, hd], in place: DW becomes h, e becomes
DW * f and g becomes d(loss)/de."""

import math

import torch

from ._gated import BACKWARD_CPU_SHAPES, BACKWARD_VARY, GEGLU_BACKWARD_SHAPES, backward_bytes, backward_inputs

SHAPES = GEGLU_BACKWARD_SHAPES
OUTPUTS = ["DW", "e", "g"]
INPLACE = ["DW", "e", "g"]  # read, then overwritten
CPU_SHAPES, VARY = BACKWARD_CPU_SHAPES, BACKWARD_VARY
make_inputs, bytes_moved = backward_inputs, backward_bytes


def reference(DW, e, g):
    """(h, DW * f, de): f = gelu_tanh(e) rounded to the dtype; de = DW * g * gelu_tanh'(e), the
    derivative written out independently of the kernel's (sech^2 = 1 - tanh^2)."""
    dtype = DW.dtype
    x = e.float()
    k = math.sqrt(2.0 / math.pi)
    t = torch.tanh(k * (x + 0.044715 * x ** 3))
    f = (0.5 * x * (1.0 + t)).to(dtype)
    h = (f.float() * g.float()).to(dtype)
    df = (DW.float() * f.float()).to(dtype)
    dg = (DW.float() * g.float()).to(dtype)
    slope = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3 * 0.044715 * x * x)
    return h, df, (dg.float() * slope).to(dtype)
