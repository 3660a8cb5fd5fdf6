"""Harness for Unsloth's geglu_exact_backward_kernel(DW, e, g): the MLP backward of h = gelu(e) * g
(erf gelu) over [tokens, hd], in place: DW becomes h, e becomes DW * f and g becomes d(loss)/de."""

import math

import torch

from ._gated import BACKWARD_CPU_SHAPES, BACKWARD_VARY, GEGLU_BACKWARD_SHAPES, backward_bytes, backward_inputs

SHAPES = GEGLU_BACKWARD_SHAPES
OUTPUTS = ["DW", "e", "g"]
INPLACE = ["DW", "e", "g"]  # read, then overwritten
CPU_SHAPES, VARY = BACKWARD_CPU_SHAPES, BACKWARD_VARY
make_inputs, bytes_moved = backward_inputs, backward_bytes


def reference(DW, e, g):
    """(h, DW * f, de): f = gelu(e) rounded to the dtype; de = DW * g * gelu'(e)."""
    dtype = DW.dtype
    x = e.float()
    partial = 0.5 * (torch.erf(x / math.sqrt(2.0)) + 1.0)
    f = (partial * x).to(dtype)
    h = (f.float() * g.float()).to(dtype)
    df = (DW.float() * f.float()).to(dtype)
    dg = (DW.float() * g.float()).to(dtype)
    slope = partial + x * torch.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    return h, df, (dg.float() * slope).to(dtype)
