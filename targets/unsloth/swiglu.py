"""Harness for Unsloth's swiglu_fg_kernel(e, g): h = silu(e) * g over [batch, seq_len, hd] (MLP forward)."""

import torch

SHAPES = [
    {"batch": 1, "seq_len": 1, "hd": 14336, "dtype": "bfloat16"},
    {"batch": 1, "seq_len": 128, "hd": 14336, "dtype": "bfloat16"},
    {"batch": 4, "seq_len": 2048, "hd": 14336, "dtype": "bfloat16"},
    {"batch": 8, "seq_len": 4096, "hd": 8192, "dtype": "bfloat16"},
    {"batch": 2, "seq_len": 2048, "hd": 11008, "dtype": "float16"},
]
CPU_SHAPES = [
    {"batch": 2, "seq_len": 3, "hd": 96, "dtype": "float16"},
    {"batch": 1, "seq_len": 5, "hd": 40, "dtype": "float32"},
]
VARY = {"seq_len": [1, 7, 333], "hd": [40, 1000, 4096]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """The gate projection e and the up projection g, [batch, seq_len, hd] each."""
    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    size = (shape["batch"], shape["seq_len"], shape["hd"])
    e = (2.0 * torch.randn(size, generator=gen, device=device)).to(dtype)
    g = torch.randn(size, generator=gen, device=device).to(dtype)
    return {"e": e, "g": g}


def reference(e, g):
    """silu(e) in float32 rounded to e's dtype (as the kernel does, "exact copy from HF"), times g."""
    ef = e.float()
    return ((ef * torch.sigmoid(ef)).to(g.dtype).float() * g.float()).to(e.dtype)


def bytes_moved(shape: dict) -> int:
    """Read e and g once, write h once."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    return 3 * size * shape["batch"] * shape["seq_len"] * shape["hd"]
