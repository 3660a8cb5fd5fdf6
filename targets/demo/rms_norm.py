"""Harness for miniserve's rms_norm(x, weight, eps) -> y."""

import torch

SHAPES = [
    {"tokens": 1, "hidden": 4096, "dtype": "bfloat16"},
    {"tokens": 256, "hidden": 4096, "dtype": "bfloat16"},
    {"tokens": 4096, "hidden": 4096, "dtype": "bfloat16"},
    {"tokens": 16384, "hidden": 8192, "dtype": "bfloat16"},
    {"tokens": 4096, "hidden": 5120, "dtype": "float16"},
]
CPU_SHAPES = [
    {"tokens": 3, "hidden": 256, "dtype": "float16"},
    {"tokens": 2, "hidden": 96, "dtype": "float32"},
]
OUTPUTS = None
VARY = {"tokens": [1, 5, 37], "hidden": [64, 96, 160, 1000]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """x [tokens, hidden] and weight [hidden], random normal."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    x = torch.randn(shape["tokens"], shape["hidden"], generator=g, device=device).to(dtype)
    w = (1.0 + 0.1 * torch.randn(shape["hidden"], generator=g, device=device)).to(dtype)
    return {"x": x, "weight": w, "eps": 1e-6}


def reference(x, weight, eps):
    """RMSNorm in float32, cast back to x's dtype."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    return y.to(x.dtype)


def bytes_moved(shape: dict) -> int:
    """Read x and weight once, write y once."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    return size * (2 * shape["tokens"] * shape["hidden"] + shape["hidden"])
