"""Harness for Unsloth's swiglu_DWf_DW_dfg_kernel(DW, e, g): the MLP backward of h = silu(e) * g over
[tokens, hd], in place: DW becomes h, e becomes DW * f (f = silu(e)) and g becomes d(loss)/de."""

import torch

from ._gated import BACKWARD_CPU_SHAPES, BACKWARD_VARY, backward_bytes, backward_inputs

SHAPES = [
    {"tokens": 1, "hd": 14336, "dtype": "bfloat16"},
    {"tokens": 512, "hd": 14336, "dtype": "bfloat16"},
    {"tokens": 8192, "hd": 14336, "dtype": "bfloat16"},
    {"tokens": 32768, "hd": 8192, "dtype": "bfloat16"},
    {"tokens": 4096, "hd": 11008, "dtype": "float16"},
]
# Every element of the three inputs is read, then overwritten: outputs the kernel also reads.
OUTPUTS = ["DW", "e", "g"]
INPLACE = ["DW", "e", "g"]
CPU_SHAPES, VARY = BACKWARD_CPU_SHAPES, BACKWARD_VARY
make_inputs, bytes_moved = backward_inputs, backward_bytes


def reference(DW, e, g):
    """(h, DW * f, de) with f = silu(e) rounded to the dtype where the kernel rounds it."""
    dtype = DW.dtype
    ef = e.float()
    se = torch.sigmoid(ef)
    f = (se * ef).to(dtype)
    h = (f.float() * g.float()).to(dtype)
    df = (DW.float() * f.float()).to(dtype)
    dg = (DW.float() * g.float()).to(dtype)
    de = (dg.float() * se * (1.0 + ef * (1.0 - se))).to(dtype)
    return h, df, de
