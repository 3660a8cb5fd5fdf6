"""Harness for SGLang's fused_rmsnorm(x, weight, eps) -> x / sqrt(mean(x^2) + eps) * weight."""

import torch

SHAPES = [
    {"tokens": 1, "hidden": 4096, "dtype": "bfloat16"},
    {"tokens": 256, "hidden": 4096, "dtype": "bfloat16"},
    {"tokens": 4096, "hidden": 4096, "dtype": "bfloat16"},
    {"tokens": 16384, "hidden": 8192, "dtype": "bfloat16"},
    {"tokens": 4096, "hidden": 6144, "dtype": "float16"},
]
CPU_SHAPES = [
    {"tokens": 3, "hidden": 256, "dtype": "float16"},
    {"tokens": 2, "hidden": 96, "dtype": "float32"},
]
OUTPUTS = None
VARY = {"tokens": [1, 7, 333, 5000], "hidden": [96, 1000, 4096]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """x [tokens, hidden] and weight [hidden] (around 1); eps 1e-6; not in place."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    x = torch.randn(shape["tokens"], shape["hidden"], generator=g, device=device).to(dtype)
    w = (1.0 + 0.1 * torch.randn(shape["hidden"], generator=g, device=device)).to(dtype)
    return {"x": x, "weight": w, "eps": 1e-6}


def reference(x, weight, eps):
    """x / sqrt(mean(x^2) + eps) * weight in float32, cast to x's dtype."""
    xf = x.float()
    return (xf / torch.sqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def bytes_moved(shape: dict) -> int:
    """Read x and weight once, write the output once."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    return size * (2 * shape["tokens"] * shape["hidden"] + shape["hidden"])
