"""Harness for Unsloth's geglu_exact_forward_kernel(gate, up): h = gelu(gate) * up (erf gelu) over
[batch, seq_len, hd] (MLP forward)."""

import math

import torch

SHAPES = [
    {"batch": 1, "seq_len": 1, "hd": 16384, "dtype": "bfloat16"},
    {"batch": 1, "seq_len": 128, "hd": 16384, "dtype": "bfloat16"},
    {"batch": 4, "seq_len": 2048, "hd": 16384, "dtype": "bfloat16"},
    {"batch": 8, "seq_len": 4096, "hd": 9216, "dtype": "bfloat16"},
    {"batch": 2, "seq_len": 2048, "hd": 24576, "dtype": "float16"},
]
CPU_SHAPES = [
    {"batch": 2, "seq_len": 3, "hd": 96, "dtype": "float16"},
    {"batch": 1, "seq_len": 5, "hd": 40, "dtype": "float32"},
]
VARY = {"seq_len": [1, 7, 333], "hd": [40, 1000, 4096]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """The gate and up projections, [batch, seq_len, hd] each."""
    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    size = (shape["batch"], shape["seq_len"], shape["hd"])
    gate = (2.0 * torch.randn(size, generator=gen, device=device)).to(dtype)
    up = torch.randn(size, generator=gen, device=device).to(dtype)
    return {"gate": gate, "up": up}


def reference(gate, up):
    """Exact (erf) gelu in float32 rounded to the dtype, as the kernel does, times up."""
    x = gate.float()
    f = (0.5 * x * (torch.erf(x / math.sqrt(2.0)) + 1.0)).to(up.dtype)
    return (f.float() * up.float()).to(gate.dtype)


def bytes_moved(shape: dict) -> int:
    """Read gate and up once, write h once."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    return 3 * size * shape["batch"] * shape["seq_len"] * shape["hd"]
