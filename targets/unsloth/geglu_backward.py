"""Harness for Unsloth's geglu_exact_backward_kernel(DW, e, g): the MLP backward of h = gelu(e) * g
(erf gelu) over [tokens, hd], in place: DW becomes h, e becomes DW * f and g becomes d(loss)/de."""

import math

import torch

SHAPES = [
    {"tokens": 1, "hd": 16384, "dtype": "bfloat16"},
    {"tokens": 512, "hd": 16384, "dtype": "bfloat16"},
    {"tokens": 8192, "hd": 16384, "dtype": "bfloat16"},
    {"tokens": 32768, "hd": 9216, "dtype": "bfloat16"},
    {"tokens": 4096, "hd": 24576, "dtype": "float16"},
]
CPU_SHAPES = [
    {"tokens": 6, "hd": 96, "dtype": "float16"},
    {"tokens": 5, "hd": 40, "dtype": "float32"},
]
OUTPUTS = ["DW", "e", "g"]
INPLACE = ["DW", "e", "g"]  # read, then overwritten
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


def bytes_moved(shape: dict) -> int:
    """Read DW, e and g once, write all three once."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    return 6 * size * shape["tokens"] * shape["hd"]
