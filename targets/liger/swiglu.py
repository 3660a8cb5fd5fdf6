"""Harness for Liger-Kernel's swiglu_forward(a, b, gate_multiplier): silu(a) * b of a gated MLP.

It returns (a, b, c): the inputs (viewed as rows) and the product; OUTPUTS names position 2.
BLOCK_SIZE and num_warps come from `calculate_settings(n_cols)` (liger_kernel/ops/utils.py); on
Blackwell a tiled kernel takes rows of 16384 columns or more (not on the H100/H200).
"""

import torch

SHAPES = [
    {"tokens": 1, "inter": 14336, "dtype": "bfloat16"},
    {"tokens": 4096, "inter": 14336, "dtype": "bfloat16"},  # Llama-3-8B MLP
    {"tokens": 16384, "inter": 4096, "dtype": "bfloat16"},
    {"tokens": 4096, "inter": 11008, "dtype": "float16"},
]
CPU_SHAPES = [
    {"tokens": 3, "inter": 256, "dtype": "float16"},
    {"tokens": 2, "inter": 96, "dtype": "float32"},
]
OUTPUTS = (2,)  # c of (a, b, c)
VARY = {"tokens": [1, 7, 33], "inter": [96, 1000, 2048]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """a (the gate) and b (the up projection), [tokens, inter]; gate_multiplier 1 (the default)."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    t, n = shape["tokens"], shape["inter"]
    a = (2.0 * torch.randn(t, n, generator=g, device=device)).to(dtype)
    b = torch.randn(t, n, generator=g, device=device).to(dtype)
    return {"a": a, "b": b, "gate_multiplier": 1.0}


def reference(a, b, gate_multiplier):
    """silu(a * gate_multiplier) in float32, rounded to the input dtype, times b (the kernel's order)."""
    act = torch.nn.functional.silu(a.float() * gate_multiplier).to(a.dtype)
    return (act.float() * b.float()).to(a.dtype)


def bytes_moved(shape: dict) -> int:
    """Read a and b, write c."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    return size * 3 * shape["tokens"] * shape["inter"]
