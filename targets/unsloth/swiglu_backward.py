"""Harness for Unsloth's swiglu_DWf_DW_dfg_kernel(DW, e, g): the MLP backward of h = silu(e) * g over
[tokens, hd], in place: DW becomes h, e becomes DW * f (f = silu(e)) and g becomes d(loss)/de."""

import torch

SHAPES = [
    {"tokens": 1, "hd": 14336, "dtype": "bfloat16"},
    {"tokens": 512, "hd": 14336, "dtype": "bfloat16"},
    {"tokens": 8192, "hd": 14336, "dtype": "bfloat16"},
    {"tokens": 32768, "hd": 8192, "dtype": "bfloat16"},
    {"tokens": 4096, "hd": 11008, "dtype": "float16"},
]
CPU_SHAPES = [
    {"tokens": 6, "hd": 96, "dtype": "float16"},
    {"tokens": 5, "hd": 40, "dtype": "float32"},
]
# Every element of the three inputs is read, then overwritten: outputs the kernel also reads.
OUTPUTS = ["DW", "e", "g"]
INPLACE = ["DW", "e", "g"]
VARY = {"tokens": [1, 7, 333], "hd": [40, 1000, 4096]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """The upstream gradient DW and the forward's e and g, [tokens, hd] each."""
    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    size = (shape["tokens"], shape["hd"])
    DW = torch.randn(size, generator=gen, device=device).to(dtype)
    e = (2.0 * torch.randn(size, generator=gen, device=device)).to(dtype)
    g = torch.randn(size, generator=gen, device=device).to(dtype)
    return {"DW": DW, "e": e, "g": g}


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


def bytes_moved(shape: dict) -> int:
    """Read DW, e and g once, write all three once."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    return 6 * size * shape["tokens"] * shape["hd"]
