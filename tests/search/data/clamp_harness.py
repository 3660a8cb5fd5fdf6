"""Harness for tests/search/data/clamp_launchers.py's scale_rows (the launch-signature tests)."""

import torch

SHAPES = [
    {"tokens": 2, "hidden": 4096, "dtype": "float16"},
    {"tokens": 3, "hidden": 8192, "dtype": "float16"},
    {"tokens": 2, "hidden": 6144, "dtype": "float16"},
]
CPU_SHAPES = [
    {"tokens": 3, "hidden": 96, "dtype": "float32"},
    {"tokens": 2, "hidden": 1000, "dtype": "float32"},
]
OUTPUTS = None
VARY = {"tokens": [1, 5], "hidden": [64, 300]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """x [tokens, hidden] and weight [hidden] around 1."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    x = torch.randn(shape["tokens"], shape["hidden"], generator=g, device=device).to(dtype)
    w = (1.0 + 0.1 * torch.randn(shape["hidden"], generator=g, device=device)).to(dtype)
    return {"x": x, "weight": w}


def reference(x, weight):
    """x / (max |x| + 1) * weight per row, in float32, cast to x's dtype."""
    xf = x.float()
    return (xf / (xf.abs().amax(-1, keepdim=True) + 1.0) * weight.float()).to(x.dtype)


def bytes_moved(shape: dict) -> int:
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    return size * (2 * shape["tokens"] * shape["hidden"] + shape["hidden"])
